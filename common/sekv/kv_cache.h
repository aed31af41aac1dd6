// KvCache: what a decode step attends over, behind one interface so that the SEKV hierarchy,
// its baselines and the full cache run through the same decode loop (SekvDecoder) and are
// compared in the same run:
//   FullKvCache      every position at full resolution (the teacher / reference);
//   SekvCache        anchors + span summaries + zoom-in + window (sekv_cache.h);
//   HeavyHitterCache SnapKV/H2O-style token eviction (h2o_cache.h);
//   chunk summaries  SekvCache over fixed-size chunks with zoom-in off (chunk_cache.h).
// A cache starts from a PrefixKv: the prompt's post-RoPE keys and values per layer (as the
// backend's KV cache holds them) and its per-token surprisal. Each decode step then calls
// Attend once per layer, which appends the step's own K/V (generated tokens always stay at
// full resolution) and returns the attention output.
#ifndef SCD_COMMON_SEKV_KV_CACHE_H_
#define SCD_COMMON_SEKV_KV_CACHE_H_

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "common/model/config.h"
#include "common/runtime/backend.h"
#include "common/sekv/span_store.h"

namespace scd::sekv {

struct CacheShape {
  int num_layers = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int kv_dim() const { return num_kv_heads * head_dim; }
  int q_dim() const { return num_heads * head_dim; }
  int group() const { return num_heads / num_kv_heads; }
  static CacheShape FromConfig(const ModelConfig& c) {
    return {c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim};
  }
};

struct PrefixKv {
  int num_tokens = 0;
  std::vector<std::vector<float>> k, v;  // [num_layers][T * kv_dim]; k after RoPE
  std::vector<float> surprisal;          // [T]
};

class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual std::string_view kind() const = 0;
  // One decode step at `layer`: appends k, v [kv_dim] (k after RoPE) and writes the
  // attention output for q [num_heads * head_dim] (after RoPE) into out [q_dim].
  virtual void Attend(int layer, const float* q, const float* k, const float* v, float* out) = 0;
  // Bytes held now (GPU tier, CPU tier) and a full cache's bytes for the same positions.
  virtual MemoryBreakdown Memory() const = 0;
};

// A cache as the attention of a row in a backend's decode step (Backend::DecodeMixed, on the
// CPU backend: host pointers, no stream).
class KvCacheRowAttention : public RowAttention {
 public:
  explicit KvCacheRowAttention(KvCache& cache) : cache_(cache) {}
  absl::Status Attend(int layer, const float* q, const float* k, const float* v, float* out,
                      void*) override {
    cache_.Attend(layer, q, k, v, out);
    return absl::OkStatus();
  }

 private:
  KvCache& cache_;
};

class FullKvCache : public KvCache {
 public:
  FullKvCache(const CacheShape& shape, const PrefixKv& prefix);
  std::string_view kind() const override { return "full"; }
  void Attend(int layer, const float* q, const float* k, const float* v, float* out) override;
  MemoryBreakdown Memory() const override;

 private:
  CacheShape shape_;
  std::vector<std::vector<float>> k_, v_;
  std::vector<float> scratch_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_KV_CACHE_H_
