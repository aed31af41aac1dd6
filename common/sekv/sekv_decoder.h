// SekvDecoder: the CPU decode path over a KvCache (kv_cache.h). It runs one token through
// the model's layers with the kernels/cpu ops, exactly as the CPU backend's decode does
// (RMSNorm → Q/K/V → RoPE → attention → Wo, residual; RMSNorm → SwiGLU FFN, residual; final
// norm → logits), except that attention goes through the cache instead of a flat KV array.
// With a FullKvCache it reproduces the backend's logits (tests/sekv checks 1e-4).
//
// The decode daemon can plug a SekvCache into its decode loop the same way; the Backend
// interface is unchanged.
#ifndef SCD_COMMON_SEKV_SEKV_DECODER_H_
#define SCD_COMMON_SEKV_SEKV_DECODER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/sekv/kv_cache.h"

namespace scd::sekv {

class SekvDecoder {
 public:
  static absl::StatusOr<std::unique_ptr<SekvDecoder>> Create(std::shared_ptr<const Model> model);

  const Model& model() const { return *model_; }
  CacheShape shape() const { return CacheShape::FromConfig(model_->config); }

  // Runs `token` at `position` with attention over `cache` (which gains the token's K/V) and
  // writes next-token logits [vocab].
  absl::Status Step(int32_t token, int position, KvCache& cache, std::vector<float>* logits);

  // One step of several sequences at once: row i runs tokens[i] at positions[i] with attention
  // over *caches[i], and its logits go to (*logits)[i]. The layers' matrices are read once for
  // all rows (a GEMM of batch rows, not one GEMV per sequence); attention stays per cache.
  // Each row's logits equal its own Step's up to the GEMM's rounding (tests/sekv checks 1e-4).
  // The tokens are checked before any cache changes: a bad one fails the whole call.
  absl::Status StepBatch(absl::Span<const int32_t> tokens, absl::Span<const int> positions,
                         absl::Span<KvCache* const> caches,
                         std::vector<std::vector<float>>* logits);

  // A PrefixKv from pre-RoPE keys and values (an SCD rebuild's ExternalKv, or a prefill's
  // LayerStates) at positions [0, T): applies this model's RoPE to the keys. `kv`'s rows are
  // taken over, not copied, when it is passed as an rvalue (a long prompt's K/V is gigabytes).
  absl::StatusOr<PrefixKv> MakePrefix(ExternalKv kv, std::vector<float> surprisal) const;
  absl::StatusOr<PrefixKv> MakePrefix(const std::vector<LayerStates>& layers, int num_tokens,
                                      std::vector<float> surprisal) const;

 private:
  explicit SekvDecoder(std::shared_ptr<const Model> model);
  std::shared_ptr<const Model> model_;
  std::vector<float> inv_freq_;
  // Activations of one step, [rows, width] (grown to the largest batch seen).
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_;
  std::vector<float> out_;  // a batch's logits, [rows, vocab]
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SEKV_DECODER_H_
