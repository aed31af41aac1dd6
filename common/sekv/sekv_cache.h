// SekvCache: the decode-side semantic KV hierarchy (SeKV, Abaskohi et al. 2026; METHOD.md
// "SEKV"). Built from a prompt's post-RoPE K/V and surprisal:
//   1. SurprisalSegmenter cuts the prompt into anchors, spans and the recent window (one
//      segmentation shared by every layer and head);
//   2. one SpanStore per layer holds the GPU tier (anchors, span summaries, window) and the
//      CPU tier (per-span low-rank bases);
//   3. at each decode step and layer, for every KV head, the ZoomRouter scores the spans
//      against the group's queries, the selected spans are requested from the SpanFetcher
//      (asynchronous rebuild, LRU of recent expansions), the resident part of attention is
//      accumulated for every head while the fetch runs, and the rebuilt tokens are merged
//      into the same softmax (mixed_attention.h): anchors | summaries (+log|S|) of the
//      unexpanded spans | expanded tokens | window.
//
// Teacher mode (calibration): with a RouterSampleSink, the step's output is full attention
// over every position (the teacher), and for each (layer, query head, span) the sink gets
// the router's inputs and the span's teacher attention mass Σ_{t∈S} p_t.
#ifndef SCD_COMMON_SEKV_SEKV_CACHE_H_
#define SCD_COMMON_SEKV_SEKV_CACHE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sekv/kv_cache.h"
#include "common/sekv/mixed_attention.h"
#include "common/sekv/span_fetcher.h"
#include "common/sekv/span_store.h"
#include "common/sekv/surprisal_segmenter.h"
#include "common/sekv/zoom_router.h"

namespace scd::sekv {

struct SekvOptions {
  SegmenterOptions segmenter;
  SpanStoreOptions store;
  int expand_budget = 64;  // expanded tokens per layer, per KV head, per step
  int cache_tokens = 0;    // expanded-span LRU capacity per (layer, head); 0 = expand_budget
  bool zoom = true;        // false: summaries only (no CPU tier, no fetches)
  bool async_fetch = true;
  int generated_reserve = 0;  // window rows reserved for generated tokens
  float tau_override = -1;    // >= 0: use this gate threshold for every head (ablations)
};

// Receives calibration samples in teacher mode.
class RouterSampleSink {
 public:
  virtual ~RouterSampleSink() = default;
  // q and summary_k are [head_dim]; log_share = ŝ_S − LSE of the resident entries; mass =
  // the span's share of the teacher's (full-cache) attention.
  virtual void Add(int layer, int kv_head, const float* q, const float* summary_k, int head_dim,
                   float log_len, float log_share, float mass) = 0;
};

struct ZoomStats {
  long steps = 0;  // (layer, kv head) routing rounds
  long expanded_spans = 0;
  long expanded_tokens = 0;
};

class SekvCache : public KvCache {
 public:
  // Segments prefix.surprisal with options.segmenter. `router` may be null for the default
  // router (share threshold 0.05). `teacher` (optional) switches on teacher mode; the prefix
  // must then outlive the cache.
  static absl::StatusOr<std::unique_ptr<SekvCache>> Create(const CacheShape& shape,
                                                           const PrefixKv& prefix,
                                                           const SekvOptions& options,
                                                           std::shared_ptr<const ZoomRouter> router,
                                                           RouterSampleSink* teacher = nullptr);
  // Same with a given segmentation (fixed-size chunks for the chunk baseline).
  static absl::StatusOr<std::unique_ptr<SekvCache>> CreateWithSegmentation(
      const CacheShape& shape, const PrefixKv& prefix, Segmentation seg, const SekvOptions& options,
      std::shared_ptr<const ZoomRouter> router, RouterSampleSink* teacher = nullptr);

  std::string_view kind() const override { return options_.zoom ? "sekv" : "summaries"; }
  void Attend(int layer, const float* q, const float* k, const float* v, float* out) override;
  MemoryBreakdown Memory() const override;

  const Segmentation& segmentation() const { return seg_; }
  const SpanStore& store(int layer) const { return stores_[layer]; }
  ZoomStats zoom_stats() const { return zoom_stats_; }
  FetchStats fetch_stats() const { return fetcher_ ? fetcher_->stats() : FetchStats{}; }

 private:
  SekvCache() = default;
  void TeacherAttend(int layer, const float* q, float* out);

  CacheShape shape_;
  SekvOptions options_;
  Segmentation seg_;
  std::vector<SpanStore> stores_;
  std::shared_ptr<const ZoomRouter> router_;
  std::unique_ptr<SpanFetcher> fetcher_;
  RouterSampleSink* teacher_ = nullptr;
  const PrefixKv* prefix_ = nullptr;  // teacher mode only
  ZoomStats zoom_stats_;
  // Step scratch.
  std::vector<float> scores_, lse_, alpha_, q_route_, tmp_;
  std::vector<uint8_t> skip_;
  std::vector<PartialAttention> partial_;
  std::vector<std::vector<int>> selected_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SEKV_CACHE_H_
