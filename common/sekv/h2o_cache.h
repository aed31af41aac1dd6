// HeavyHitterCache: the token-eviction baseline, SnapKV-style (Li et al. 2024, "SnapKV:
// LLM knows what you are looking for before generation") with H2O's heavy-hitter criterion
// (Zhang et al. 2023). Per layer and KV head it keeps `sink_tokens` + the most attended
// prompt tokens + the last `window` prompt tokens, `budget_tokens` in all, and drops the rest.
//
// Selection happens once, at the first decode step of each layer: that step's queries act as
// the observation window (in this offline path no earlier consumer query exists: the prompt's
// K/V came from a prefill, possibly the producer's). A token's weight for KV head g is its
// softmax probability summed over g's query heads, max-pooled over ±pool_radius positions
// (SnapKV's clustering, so that neighbours of a hit survive with it). Generated tokens are
// appended at full resolution, as in every other cache here.
#ifndef SCD_COMMON_SEKV_H2O_CACHE_H_
#define SCD_COMMON_SEKV_H2O_CACHE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sekv/kv_cache.h"

namespace scd::sekv {

struct HeavyHitterOptions {
  int budget_tokens = 128;  // prompt tokens kept per layer and KV head (sinks + hits + window)
  int window = 32;
  int sink_tokens = 1;
  int pool_radius = 2;
};

class HeavyHitterCache : public KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<HeavyHitterCache>> Create(
      const CacheShape& shape, const PrefixKv& prefix, const HeavyHitterOptions& options);
  std::string_view kind() const override { return "h2o"; }
  void Attend(int layer, const float* q, const float* k, const float* v, float* out) override;
  MemoryBreakdown Memory() const override;

 private:
  HeavyHitterCache() = default;
  void Select(int layer, const float* q);

  CacheShape shape_;
  HeavyHitterOptions options_;
  int prompt_tokens_ = 0;
  int generated_ = 0;                                    // counted on layer 0
  std::vector<std::vector<float>> prompt_k_, prompt_v_;  // [layer] until selected
  // kept[layer][head]: [rows, head_dim] K and V (prompt tokens kept, then generated).
  std::vector<std::vector<std::vector<float>>> k_, v_;
  std::vector<uint8_t> selected_;  // per layer
  std::vector<float> scratch_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_H2O_CACHE_H_
