// See budget_plan.h.
#include "common/sekv/budget_plan.h"

#include <algorithm>
#include <cmath>

namespace scd::sekv {

BudgetPlan PlanBudget(absl::Span<const float> surprisal, double fraction, const SekvOptions& base,
                      const BudgetShares& shares, int head_dim) {
  BudgetPlan plan;
  const int t = static_cast<int>(surprisal.size());
  const int sinks = std::min(base.segmenter.sink_tokens, t);
  const int g = std::max(sinks + 1, static_cast<int>(std::floor(fraction * t)) - 1);
  plan.budget_tokens = g;
  int w = std::max(shares.min_window, static_cast<int>(std::lround(shares.window_share * g)));
  w = std::max(0, std::min({w, t - sinks, g - sinks}));
  const int b_target = static_cast<int>(std::lround(shares.expand_share * g));

  SekvOptions o = base;
  o.segmenter.window = w;
  const int base_min = base.segmenter.min_span;
  Segmentation seg;
  for (int ms = base_min;; ++ms) {
    o.segmenter.min_span = ms;
    if (base.segmenter.max_span > 0)
      o.segmenter.max_span = std::max(base.segmenter.max_span, 2 * ms);
    seg = SurprisalSegmenter::Create(o.segmenter)->Segment(surprisal);
    const int fixed = static_cast<int>(seg.anchors.size() + seg.spans.size()) + seg.window_length();
    if (fixed + b_target <= g || ms >= t) break;
  }
  const int fixed = static_cast<int>(seg.anchors.size() + seg.spans.size()) + seg.window_length();
  int zoom_slots = o.zoom ? std::max(0, g - fixed) : 0;
  const float pin_share = std::clamp(shares.pin_share, 0.0f, 1.0f);
  if (pin_share > 0 && zoom_slots > 0) {
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

}  // namespace scd::sekv
