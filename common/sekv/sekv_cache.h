// SekvCache: the decode-side semantic KV hierarchy (SeKV, Abaskohi et al. 2026; docs/METHOD.md
// "SEKV"). Built from a prompt's post-RoPE K/V and surprisal:
//   1. SurprisalSegmenter cuts the prompt into anchors, spans and the recent window (one
//      segmentation shared by every layer and head);
//   2. one SpanStore per layer holds the GPU tier (anchors, span summaries, window) and the
//      CPU tier (per-span low-rank bases);
//   3. at each decode step and layer, for every KV head, the ZoomRouter scores the spans
//      against the group's queries and picks candidate spans; the zoom-in brings their
//      content into the expansion buffer through the SpanFetcher (asynchronous rebuild, LRU
//      of recently expanded rows); the resident part of attention is accumulated for every
//      head while the fetch runs, and the rebuilt tokens are merged into the same softmax
//      (mixed_attention.h): anchors | summaries (+log count) | pinned | expanded | window.
//
// Zoom resolution:
//   - kSpan (SeKV as published): the candidate spans are expanded whole, within
//     expand_budget tokens;
//   - kToken (default): the candidates may hold candidate_factor × expand_budget tokens; their
//     tokens are scored in the CPU tier's low-rank coordinates (token_zoom.h) and only the
//     expand_budget heaviest move into the buffer. The tokens of a span that stay behind are
//     still represented by its summary, now counted as |S| − (expanded tokens).
//
// Observation-window anchors ("pinned" tokens, pin_tokens per layer and KV head): at the
// first decode step of each layer the zoom-in runs once over every span (an exhaustive
// token-resolution zoom, as SnapKV selects with the prompt's last queries) and the
// pin_tokens heaviest tokens stay in the GPU tier for the rest of the request. Surprisal
// anchors are what the producer found hard to predict; pinned tokens are what the consumer's
// question reads. A pinned token leaves its span: the summary's count drops by one and the
// zoom-in never expands it again, so each token is counted once in the softmax.
//
// Teacher mode (calibration): with a RouterSampleSink, the step's output is full attention
// over every position (the teacher), and for each (layer, query head, span) the sink gets
// the router's inputs and the span's teacher attention mass Σ_{t∈S} p_t. No tokens are pinned
// in teacher mode.
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
#include "common/sekv/token_zoom.h"
#include "common/sekv/zoom_router.h"

namespace scd::sekv {

enum class ZoomResolution { kSpan, kToken };

struct SekvOptions {
  SegmenterOptions segmenter;
  SpanStoreOptions store;
  int expand_budget = 64;  // expanded tokens per layer, per KV head, per step
  int cache_tokens = 0;    // expansion buffer (LRU) rows per (layer, head); 0 = expand_budget
  ZoomResolution resolution = ZoomResolution::kToken;
  float candidate_factor = 2.0f;  // kToken: candidate spans hold up to this × expand_budget
  int pin_tokens = 0;             // observation-window anchors per (layer, KV head)
  bool zoom = true;               // false: summaries only (no CPU tier, no fetches)
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
  long steps = 0;             // (layer, kv head) routing rounds
  long expanded_spans = 0;    // spans that contributed at least one expanded token
  long expanded_tokens = 0;   // tokens moved into the expansion buffer (hits included)
  long candidate_tokens = 0;  // tokens scored in the CPU tier (kToken)
  long pinned_tokens = 0;     // observation-window anchors chosen, over layers and heads
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
  const SekvOptions& options() const { return options_; }
  const CacheShape& shape() const { return shape_; }
  bool teacher_mode() const { return teacher_ != nullptr; }
  void Attend(int layer, const float* q, const float* k, const float* v, float* out) override;
  MemoryBreakdown Memory() const override;

  const Segmentation& segmentation() const { return seg_; }
  const SpanStore& store(int layer) const { return stores_[layer]; }
  ZoomStats zoom_stats() const { return zoom_stats_; }
  FetchStats fetch_stats() const { return fetcher_ ? fetcher_->stats() : FetchStats{}; }
  const ZoomRouter& router() const { return *router_; }

  // ---- The same step with the resident tier held elsewhere (the GPU path, gpu_sekv.h) ----
  // An executor that keeps anchors, summaries, window and pins on a device computes the
  // resident log-sum-exp and the gate α there, and leaves the rest of Attend to this cache on
  // the host. For layer l, in this order:
  //   1. ExternalAppend(l, k, v): the new token joins the window (the host copy);
  //   2. if !pins_done(l): ExternalPin(l, q, lse), lse [num_heads] over anchors | summaries
  //      (summary_log_count) | window. Chooses the observation-window anchors: pin_k/pin_v,
  //      pin_rows, summary_log_count and summary_remaining change;
  //   3. ExternalZoom(l, q, lse, alpha), lse over anchors | summaries | window | pins and
  //      alpha [num_kv_heads, num_spans] the gate (0 where no token is left). Selects and
  //      requests the expansions of every KV head; nothing when !zooms(l);
  //   4. the resident part of the softmax counts each summary as summary_remaining −
  //      expanded(g)[s] tokens (left out at 0); ExpandedRows(l, g) are the expanded tokens.
  // Attend is this protocol with every step on the host (tests/sekv checks that the two
  // agree). Not in teacher mode.
  bool pins_done(int l) const { return pins_done_[l] != 0; }
  bool zooms(int l) const {
    return fetcher_ != nullptr && stores_[l].num_spans() > 0 && options_.expand_budget > 0;
  }
  void ExternalAppend(int l, const float* k, const float* v) { stores_[l].AppendWindow(k, v); }
  // Both fail (changing nothing) on a wrong layer or sizes, ExternalPin on a pinned layer.
  absl::Status ExternalPin(int l, const float* q, absl::Span<const float> lse);
  absl::Status ExternalZoom(int l, const float* q, absl::Span<const float> lse,
                            absl::Span<const float> alpha);
  // [num_kv_heads, pin_tokens, head_dim] rows (null without pins); rows filled per KV head.
  const float* pin_k(int l) const { return pin_k_.empty() ? nullptr : pin_k_[l].data(); }
  const float* pin_v(int l) const { return pin_v_.empty() ? nullptr : pin_v_[l].data(); }
  int pin_rows(int l, int g) const { return pin_rows_.empty() ? 0 : pin_rows_[l][g]; }
  // [num_spans] for (layer, KV head): tokens each summary stands for, and its log (-1e30 at 0).
  const int* summary_remaining(int l, int g) const {
    return remaining_[l].data() + static_cast<size_t>(g) * seg_.spans.size();
  }
  const float* summary_log_count(int l, int g) const {
    return log_count_[l].data() + static_cast<size_t>(g) * seg_.spans.size();
  }
  // [num_spans]: tokens of each span KV head g expanded at the last zoomed layer.
  const int* expanded(int g) const { return expanded_.data() + g * seg_.spans.size(); }
  // Waits for the expansion of (l, g) requested by ExternalZoom; rows flagged active.
  BufferView ExpandedRows(int l, int g) { return fetcher_->Get(l, g); }
  // For an executor that also zooms elsewhere (GpuSekv on the device): the per-token pinned
  // flags of layer l, [num_kv_heads, span tokens] (null without pins), where token i of span s
  // is at span_token_offset(s) + i and span_token_offset(num_spans) is the row length; and
  // the counts of the zoom-ins it ran, added to zoom_stats().
  const uint8_t* pinned_flags(int l) const { return pinned_.empty() ? nullptr : pinned_[l].data(); }
  int span_token_offset(int s) const { return span_offset_[s]; }
  void AddZoomStats(const ZoomStats& z);

 private:
  SekvCache() = default;
  // The span store of every layer, built in parallel from the prefix K/V (shape_, options_ set).
  void BuildStores(const PrefixKv& prefix, const Segmentation& seg);
  // span_offset_, and every layer's remaining_ and log_count_ at their unpinned values.
  void InitSpanCounts(const Segmentation& seg);
  // Clamps options_.pin_tokens to the prefix and sizes the pin buffers (span_offset_ set).
  void InitPins();
  void TeacherAttend(int layer, const float* q, float* out);
  // scores_ and lse_ for the resident entries of `layer`: anchors | summaries | window | pins.
  void ResidentScores(int layer, const float* q);
  // The observation-window anchors of `layer` (first decode step; ResidentScores done).
  void Pin(int layer, const float* q);
  // The gate α of every span for KV head g of `layer` into alpha_ (ResidentScores done).
  void GateAlpha(int layer, int g, const float* q);
  // Picks KV head g's expansion from alpha_ and lse_ and requests it; fills expanded_ for g.
  void Select(int layer, int g, const float* q);
  float* log_count(int l, int g) {
    return log_count_[l].data() + static_cast<size_t>(g) * seg_.spans.size();
  }
  int* remaining(int l, int g) {
    return remaining_[l].data() + static_cast<size_t>(g) * seg_.spans.size();
  }

  CacheShape shape_;
  SekvOptions options_;
  Segmentation seg_;
  std::vector<SpanStore> stores_;
  std::shared_ptr<const ZoomRouter> router_;
  std::unique_ptr<SpanFetcher> fetcher_;
  RouterSampleSink* teacher_ = nullptr;
  const PrefixKv* prefix_ = nullptr;  // teacher mode only
  ZoomStats zoom_stats_;
  // Per layer, [num_kv_heads × num_spans]: tokens of each span its summary still stands for
  // (|S| minus pinned tokens) and the log of that count (the summary's log-count term).
  std::vector<std::vector<int>> remaining_;
  std::vector<std::vector<float>> log_count_;
  // Per layer: whether its pins are chosen; [num_kv_heads × span tokens] pinned flags (span
  // token j of the layer = span_offset_[s] + offset); pinned rows [num_kv_heads × pin_tokens,
  // head_dim] and how many each head has.
  std::vector<uint8_t> pins_done_;
  std::vector<std::vector<uint8_t>> pinned_;
  std::vector<std::vector<float>> pin_k_, pin_v_;
  std::vector<std::vector<int>> pin_rows_;
  std::vector<int> span_offset_;  // [num_spans + 1], prefix sums of span lengths
  // Step scratch.
  std::vector<float> scores_, lse_, alpha_, q_route_, tmp_, zoom_scratch_;
  std::vector<uint8_t> skip_, inactive_;
  std::vector<int> expanded_;  // [num_kv_heads × num_spans] tokens expanded this step
  std::vector<PartialAttention> partial_;
  std::vector<ScoredToken> scored_;
  std::vector<TokenRef> rows_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SEKV_CACHE_H_
