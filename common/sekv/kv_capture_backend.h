// KvCaptureBackend: a Backend decorator that forwards every call to another backend and keeps
// a copy of the external K/V appended (AppendKv) since the last TakeCaptured, in order (the
// consumer codec appends a long payload a block of rows at a time). The SCD consumer codec
// rebuilds its pre-RoPE K/V into a backend sequence; wrapping the consumer's backend lets the
// SEKV path take that same K/V into its own hierarchy without any change to the Backend
// interface.
#ifndef SCD_COMMON_SEKV_KV_CAPTURE_BACKEND_H_
#define SCD_COMMON_SEKV_KV_CAPTURE_BACKEND_H_

#include <utility>

#include "common/base/status_macros.h"
#include "common/runtime/backend.h"

namespace scd::sekv {

class KvCaptureBackend : public Backend {
 public:
  explicit KvCaptureBackend(Backend& inner) : inner_(inner) {}

  std::string_view name() const override { return inner_.name(); }
  std::string device_description() const override { return inner_.device_description(); }
  std::string kernel_description() const override { return inner_.kernel_description(); }
  const Model& model() const override { return inner_.model(); }
  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence(int capacity) override {
    return inner_.NewSequence(capacity);
  }
  size_t SequenceBytes(int capacity) const override { return inner_.SequenceBytes(capacity); }
  absl::StatusOr<DeviceMemory> DeviceMemoryNow() const override { return inner_.DeviceMemoryNow(); }
  absl::Status ReserveWorkspace(const WorkspaceShape& shape) override {
    return inner_.ReserveWorkspace(shape);
  }
  WorkspaceBytes Workspace() const override { return inner_.Workspace(); }
  absl::Status Prefill(Sequence& seq, absl::Span<const int32_t> tokens,
                       const PrefillOptions& options, PrefillResult* result) override {
    return inner_.Prefill(seq, tokens, options, result);
  }
  absl::Status AppendKv(Sequence& seq, const ExternalKv& kv) override {
    SCD_RETURN_IF_ERROR(inner_.AppendKv(seq, kv));
    if (captured_.num_tokens == 0) {
      captured_ = kv;
      return absl::OkStatus();
    }
    for (size_t l = 0; l < kv.k_pre_rope.size() && l < captured_.k_pre_rope.size(); ++l) {
      captured_.k_pre_rope[l].insert(captured_.k_pre_rope[l].end(), kv.k_pre_rope[l].begin(),
                                     kv.k_pre_rope[l].end());
      captured_.v[l].insert(captured_.v[l].end(), kv.v[l].begin(), kv.v[l].end());
    }
    captured_.num_tokens += kv.num_tokens;
    return absl::OkStatus();
  }
  absl::Status Decode(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                      std::vector<float>* logits) override {
    return inner_.Decode(seqs, tokens, logits);
  }
  absl::Status RecomputeLayers(Sequence& seq, int start, int first_layer, int end_layer,
                               absl::Span<const float> residual_in) override {
    return inner_.RecomputeLayers(seq, start, first_layer, end_layer, residual_in);
  }

  const ExternalKv& captured() const { return captured_; }
  ExternalKv TakeCaptured() { return std::exchange(captured_, ExternalKv{}); }

 private:
  Backend& inner_;
  ExternalKv captured_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_KV_CAPTURE_BACKEND_H_
