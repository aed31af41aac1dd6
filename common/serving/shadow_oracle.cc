// See shadow_oracle.h.
#include "common/serving/shadow_oracle.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/eval/metrics.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;

// ‖a − b‖ / ‖b‖ over one layer's rows (0 when both are zero, 1 when only b is).
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  if (norm == 0) return diff == 0 ? 0.0 : 1.0;
  return std::sqrt(diff / norm);
}

absl::Span<const float> Rows(const std::vector<float>& logits, int first, int rows, int vocab) {
  return absl::MakeConstSpan(logits).subspan(static_cast<size_t>(first) * vocab,
                                             static_cast<size_t>(rows) * vocab);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShadowComparison>> ShadowComparison::Create(
    Payload payload, std::vector<int32_t> suffix, std::vector<int32_t> generated) {
  if (payload.mode == CodecMode::kOracle) {
    return absl::InvalidArgumentError("an oracle payload has no rebuilt cache to compare");
  }
  if (payload.start_position != 0 || payload.token_ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shadow oracle compares payloads from position 0 (this one starts at ",
                     payload.start_position, " with ", payload.token_ids.size(), " tokens)"));
  }
  if (suffix.empty() || generated.empty()) {
    return absl::InvalidArgumentError("the shadow oracle needs a suffix and a generated token");
  }
  std::unique_ptr<ShadowComparison> c(new ShadowComparison());
  c->payload_tokens_ = payload.token_ids;
  c->suffix_tokens_ = static_cast<int>(suffix.size());
  c->rows_ = static_cast<int>(generated.size());
  c->continuation_ = std::move(suffix);
  c->continuation_.insert(c->continuation_.end(), generated.begin(), generated.end() - 1);
  c->rebuild_ = PayloadChunks(std::move(payload));
  return c;
}

absl::Status ShadowComparison::Advance(Backend& backend, const ConsumerCodec& codec,
                                       int max_tokens) {
  const size_t budget = static_cast<size_t>(std::max(1, max_tokens));
  PrefillOptions all;
  all.all_logits = true;
  PrefillResult r;
  switch (stage_) {
    case Stage::kRebuild: {
      if (served_ == nullptr) {
        SCD_ASSIGN_OR_RETURN(served_, backend.NewSequence(positions()));
      }
      SCD_RETURN_IF_ERROR(rebuild_.Advance(codec, backend, *served_, budget).status());
      if (rebuild_.remaining() == 0) stage_ = Stage::kServedContinuation;
      return absl::OkStatus();
    }
    case Stage::kServedContinuation:
      SCD_RETURN_IF_ERROR(backend.Prefill(*served_, continuation_, all, &r));
      served_logits_ = std::move(r.logits);
      stage_ = Stage::kOwnPrefill;
      return absl::OkStatus();
    case Stage::kOwnPrefill: {
      if (own_ == nullptr) {
        SCD_ASSIGN_OR_RETURN(own_, backend.NewSequence(positions()));
      }
      const size_t n = std::min(budget, payload_tokens_.size() - own_prefilled_);
      SCD_RETURN_IF_ERROR(backend.Prefill(
          *own_, absl::MakeConstSpan(payload_tokens_).subspan(own_prefilled_, n), {}, &r));
      own_prefilled_ += n;
      if (own_prefilled_ == payload_tokens_.size()) stage_ = Stage::kOwnContinuation;
      return absl::OkStatus();
    }
    case Stage::kOwnContinuation:
      SCD_RETURN_IF_ERROR(backend.Prefill(*own_, continuation_, all, &r));
      SCD_RETURN_IF_ERROR(Finish(backend, r.logits));
      stage_ = Stage::kDone;
      return absl::OkStatus();
    case Stage::kDone:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status ShadowComparison::Finish(Backend& backend, const std::vector<float>& own_logits) {
  const int vocab = backend.model().config.vocab_size;
  const int first = suffix_tokens_ - 1;  // the row after the suffix: the first generated
  const auto own = Rows(own_logits, first, rows_, vocab);
  const auto served = Rows(served_logits_, first, rows_, vocab);
  SCD_ASSIGN_OR_RETURN(eval::LogitAgreement agree, eval::CompareLogitRows(own, served, vocab));
  stats_.mean_kl = agree.mean_kl;
  stats_.top1_agreement = agree.top1_agreement;
  stats_.rows = rows_;
  SCD_ASSIGN_OR_RETURN(stats_.first_kl, eval::NextTokenKl(own.first(vocab), served.first(vocab)));
  SCD_ASSIGN_OR_RETURN(stats_.first_top1, eval::Top1Agrees(own.first(vocab), served.first(vocab)));
  const int p = static_cast<int>(payload_tokens_.size());
  ExternalKv a, b;
  absl::Status read = backend.ReadKv(*served_, 0, p, &a);
  if (read.ok()) read = backend.ReadKv(*own_, 0, p, &b);
  if (read.code() == absl::StatusCode::kUnimplemented) return absl::OkStatus();
  SCD_RETURN_IF_ERROR(read);
  for (size_t l = 0; l < b.v.size(); ++l) {
    stats_.k_rel_error.push_back(RelativeError(a.k_pre_rope[l], b.k_pre_rope[l]));
    stats_.v_rel_error.push_back(RelativeError(a.v[l], b.v[l]));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShadowStats> CompareWithOwnCache(Backend& backend, const ConsumerCodec& codec,
                                                Payload payload, std::vector<int32_t> suffix,
                                                std::vector<int32_t> generated) {
  SCD_ASSIGN_OR_RETURN(auto c, ShadowComparison::Create(std::move(payload), std::move(suffix),
                                                        std::move(generated)));
  while (!c->done()) {
    SCD_RETURN_IF_ERROR(c->Advance(backend, codec, std::numeric_limits<int>::max()));
  }
  return c->stats();
}

bool ShadowOracle::Pick() {
  if (!enabled()) return false;
  const double rate = std::min(1.0, options_.rate);
  const uint64_t n = picks_.fetch_add(1);
  // The n-th request is picked where floor(n × rate) steps up: exactly every 1/rate-th.
  return std::floor((n + 1) * rate + 1e-9) > std::floor(n * rate + 1e-9);
}

void ShadowOracle::Drop(const std::string& reason, const absl::Status& error) {
  if (options_.on_drop) options_.on_drop(reason, error);
}

void ShadowOracle::Offer(ShadowJob job) {
  if (static_cast<int>(pending_.size()) >= options_.max_pending) return Drop("busy");
  // The budget refills at max_tokens_per_s; a sample is taken while it is not in debt and
  // charged its tokens (its payload's rows rebuilt and prefilled, and both continuations).
  const auto now = Clock::now();
  if (budget_time_ != Clock::time_point{}) {
    const double refill =
        std::chrono::duration<double>(now - budget_time_).count() * options_.max_tokens_per_s;
    budget_tokens_ = std::min(options_.max_tokens_per_s, budget_tokens_ + refill);
  } else {
    budget_tokens_ = options_.max_tokens_per_s;
  }
  budget_time_ = now;
  if (budget_tokens_ < 0) return Drop("budget");
  absl::StatusOr<PayloadHeaderSummary> header = PeekPayloadHeader(job.payload);
  if (!header.ok()) return Drop("error", header.status());
  budget_tokens_ -= 2.0 * (header->num_tokens + job.suffix.size() + job.generated.size());
  pending_.push_back(std::move(job));
}

absl::Status ShadowOracle::Start(Backend& backend, const std::function<bool(int64_t)>& fits,
                                 std::atomic<int64_t>* pool, bool* dropped) {
  ShadowJob job = std::move(pending_.front());
  pending_.pop_front();
  SCD_ASSIGN_OR_RETURN(Payload payload, ParsePayload(job.payload));
  sample_ =
      ShadowSample{payload.mode, payload.rung, static_cast<int>(payload.token_ids.size()), {}};
  SCD_ASSIGN_OR_RETURN(current_, ShadowComparison::Create(std::move(payload), std::move(job.suffix),
                                                          std::move(job.generated)));
  const int64_t bytes = 2 * static_cast<int64_t>(backend.SequenceBytes(current_->positions()));
  if (!fits(bytes)) {
    current_.reset();
    *dropped = true;
    Drop("memory");
    return absl::OkStatus();
  }
  pool_ = pool;
  held_bytes_ = bytes;
  if (pool_ != nullptr) pool_->fetch_add(held_bytes_);
  return absl::OkStatus();
}

void ShadowOracle::Release() {
  current_.reset();
  if (pool_ != nullptr) pool_->fetch_sub(held_bytes_);
  pool_ = nullptr;
  held_bytes_ = 0;
}

void ShadowOracle::RunPiece(Backend& backend, const ConsumerCodec& codec,
                            const std::function<bool(int64_t)>& fits, std::atomic<int64_t>* pool) {
  if (current_ == nullptr) {
    if (pending_.empty()) return;
    bool dropped = false;
    if (absl::Status st = Start(backend, fits, pool, &dropped); !st.ok()) {
      Release();
      return Drop("error", st);
    }
    if (dropped) return;
  }
  if (absl::Status st = current_->Advance(backend, codec, options_.piece_tokens); !st.ok()) {
    Release();
    return Drop("error", st);
  }
  if (!current_->done()) return;
  sample_.stats = current_->stats();
  Release();
  if (options_.on_sample) options_.on_sample(sample_);
}

void ShadowOracle::Preempt() {
  if (current_ == nullptr) return;
  Release();
  Drop("preempted");
}

}  // namespace scd
