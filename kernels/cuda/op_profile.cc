// OpClock (op_profile.h): events recorded after each operation of a forward pass, read back
// once the stream has passed them.
#include "kernels/cuda/op_profile.h"

#include <utility>

#include "common/base/status_macros.h"

namespace scd::cuda {

void OpClock::Enable(bool on) {
  on_ = on;
  used_ = 0;
  folded_ = OpProfile{};
}

absl::Status OpClock::Record(int tag, StreamHandle stream) {
  if (used_ == events_.size()) {
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Event> event, Event::Create());
    events_.push_back(std::move(event));
    tags_.emplace_back();
  }
  tags_[used_] = tag;
  SCD_RETURN_IF_ERROR(events_[used_]->Record(stream));
  ++used_;
  return absl::OkStatus();
}

absl::Status OpClock::Begin(StreamHandle stream) {
  if (!on_) return absl::OkStatus();
  if (used_ >= kFoldAt) SCD_RETURN_IF_ERROR(Fold());
  return Record(kPassStart, stream);
}

absl::Status OpClock::Mark(OpClass c, absl::Status op, StreamHandle stream) {
  if (!op.ok() || !on_) return op;
  if (used_ == 0) {
    return absl::FailedPreconditionError("OpClock: an operation marked before its pass began");
  }
  return Record(static_cast<int>(c), stream);
}

absl::Status OpClock::Fold() {
  if (used_ == 0) return absl::OkStatus();
  SCD_RETURN_IF_ERROR(events_[used_ - 1]->Synchronize());
  size_t start = 0;
  for (size_t i = 0; i < used_; ++i) {
    if (tags_[i] == kPassStart) {
      start = i;
      ++folded_.passes;
      continue;
    }
    SCD_ASSIGN_OR_RETURN(const float ms, Event::ElapsedMs(*events_[i - 1], *events_[i]));
    folded_.ms[tags_[i]] += ms;
    ++folded_.ops[tags_[i]];
    if (i + 1 == used_ || tags_[i + 1] == kPassStart) {  // the pass's last operation
      SCD_ASSIGN_OR_RETURN(const float pass, Event::ElapsedMs(*events_[start], *events_[i]));
      folded_.pass_ms += pass;
    }
  }
  used_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<OpProfile> OpClock::Take() {
  SCD_RETURN_IF_ERROR(Fold());
  OpProfile out = folded_;
  folded_ = OpProfile{};
  return out;
}

}  // namespace scd::cuda
