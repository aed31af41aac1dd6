// See budget_plan.h.
#include "common/sekv/budget_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace scd::sekv {

absl::Status CheckBudget(double fraction) {
  if (!(fraction >= kMinBudget && fraction <= kMaxBudget)) {
    return absl::InvalidArgumentError(absl::StrCat("sekv budget must be in [", kMinBudget, ", ",
                                                   kMaxBudget, "], got ", fraction));
  }
  return absl::OkStatus();
}

namespace {

// Token-equivalents the segmentation's rows and the tier's span overheads take.
double FixedCost(const Segmentation& seg, const TierOverhead& tier) {
  const double rows =
      static_cast<double>(seg.anchors.size() + seg.spans.size()) + seg.window_length();
  double span_tokens = 0;
  for (const TokenSpan& s : seg.spans) span_tokens += s.end - s.begin;
  return tier.row * rows + tier.per_span * static_cast<double>(seg.spans.size()) +
         tier.per_span_token * span_tokens + tier.fixed;
}

}  // namespace

BudgetPlan PlanBudget(absl::Span<const float> surprisal, double fraction, const SekvOptions& base,
                      const BudgetShares& shares, int head_dim, const TierOverhead& tier) {
  BudgetPlan plan;
  const int t = static_cast<int>(surprisal.size());
  const int sinks = std::min(base.segmenter.sink_tokens, t);
  const double row = std::max(tier.row, 1e-9);
  // One row kept in reserve: the summaries' log|S| floats, and the row the window gains at
  // the first decode step (a row of the tier: `row` token-equivalents).
  const int reserve = std::max(1, static_cast<int>(std::ceil(row - 1e-9)));
  const int g = std::max(sinks + 1, static_cast<int>(std::floor(fraction * t)) - reserve);
  plan.budget_tokens = g;
  const int g_rows = static_cast<int>(std::floor(g / row));  // rows of the tier that fit G
  int w = std::max(shares.min_window, static_cast<int>(std::lround(shares.window_share * g_rows)));
  w = std::max(0, std::min({w, t - sinks, g_rows - sinks}));
  const double b_target = std::lround(shares.expand_share * g);  // token-equivalents

  SekvOptions o = base;
  o.segmenter.window = w;
  const int base_min = base.segmenter.min_span;
  Segmentation seg;
  for (int ms = base_min;; ++ms) {
    o.segmenter.min_span = ms;
    if (base.segmenter.max_span > 0)
      o.segmenter.max_span = std::max(base.segmenter.max_span, 2 * ms);
    seg = SurprisalSegmenter::Create(o.segmenter)->Segment(surprisal);
    if (FixedCost(seg, tier) + b_target <= g || ms >= t) break;
  }
  const float pin_share = std::clamp(shares.pin_share, 0.0f, 1.0f);
  // The zoom-in's slots: pins cost a row each, expansion slots a row and their overhead.
  const double left = std::max(0.0, g - FixedCost(seg, tier));
  int zoom_slots =
      o.zoom
          ? static_cast<int>(std::floor(left / (row + (1 - pin_share) * tier.per_zoom_slot) + 1e-9))
          : 0;
  if (pin_share > 0 && zoom_slots > 0 && !tier.counts_included) {
    const int per_head_floats = static_cast<int>(seg.spans.size());
    const int reserve =
        (per_head_floats + 2 * std::max(head_dim, 1) - 1) / (2 * std::max(head_dim, 1));
    zoom_slots = std::max(0, zoom_slots - reserve);
  }
  o.pin_tokens = static_cast<int>(std::lround(pin_share * zoom_slots));
  o.expand_budget = zoom_slots - o.pin_tokens;
  o.cache_tokens = o.expand_budget;
  plan.sekv = o;
  plan.segmentation = seg;

  plan.chunk.window = w;
  plan.chunk.sink_tokens = sinks;
  const int middle = std::max(0, t - sinks - w);
  const int slots = std::max(1, g - sinks - w);
  plan.chunk.num_chunks = std::min(slots, std::max(middle, 1));
  plan.chunk.chunk_size = std::max(1, (middle + slots - 1) / slots);

  plan.h2o.budget_tokens = g;
  plan.h2o.window = w;
  plan.h2o.sink_tokens = sinks;
  return plan;
}

HostBound MaxHostBytes(const CacheShape& shape, const SekvOptions& options, double fraction,
                       int64_t prompt_tokens) {
  HostBound b;
  const auto t = static_cast<size_t>(std::max<int64_t>(prompt_tokens, 0));
  if (t == 0) return b;
  const size_t f = sizeof(float);
  const size_t layers = static_cast<size_t>(shape.num_layers);
  const size_t heads = static_cast<size_t>(shape.num_kv_heads);
  const size_t d = static_cast<size_t>(shape.head_dim);
  const size_t row = 2 * f * layers * heads * d;  // a token-equivalent in every layer and head
  const double sinks = static_cast<double>(
      std::min<int64_t>(std::max(options.segmenter.sink_tokens, 0), prompt_tokens));
  const double rows = std::max(fraction * static_cast<double>(t), sinks + 2);
  b.gpu_tier = static_cast<size_t>(std::ceil(rows)) * row + t * layers * (1 + heads) * f;
  if (options.zoom && options.store.build_cpu_tier) {
    const size_t m =
        static_cast<size_t>(std::max(1, std::min(options.store.r_max, shape.head_dim)));
    b.cpu_tier = t * 2 * f * layers * heads * (m + d);
  }
  return b;
}

}  // namespace scd::sekv
