// Budget planning: turns a GPU budget F (GPU-tier bytes as a fraction of a full KV cache of
// the prompt) into each cache's parameters, so that SEKV and both baselines are compared at
// the same memory. Everything is counted in token-equivalents per (layer, KV head): a full
// token, an anchor, a span summary and a slot of the expanded-span cache each hold one K and
// one V row of head_dim floats, so G = floor(F · T) − 1 of them fit (one kept in reserve for
// the summaries' log|S| floats).
//
// SEKV: window W = window_share · G (at least min_window), zoom-in slots B =
// expand_share · G, and the segmentation must fit anchors + summaries into G − W − B: the
// minimum span length is raised until it does (fewer, longer spans; zoom-in recovers the
// detail). Whatever is left over goes to B too. B is then split: pin_share · B slots hold the
// observation-window anchors chosen at the first decode step (sekv_cache.h), the rest is
// the expansion buffer of the per-step zoom-in. With pins, each KV head keeps its own count of
// the tokens each summary stands for (one float per span and head): ⌈spans / (2·head_dim)⌉
// token-equivalents, reserved before the split.
// Chunk summaries: the same window; every other slot is a chunk summary: G − sinks − W
// near-equal chunks over the T − sinks − W middle tokens.
// Heavy hitters: G tokens kept (sinks + hits + the same window).
#ifndef SCD_COMMON_SEKV_BUDGET_PLAN_H_
#define SCD_COMMON_SEKV_BUDGET_PLAN_H_

#include "absl/types/span.h"
#include "common/sekv/chunk_cache.h"
#include "common/sekv/h2o_cache.h"
#include "common/sekv/sekv_cache.h"

namespace scd::sekv {

struct BudgetShares {
  float window_share = 0.2f;
  float expand_share = 0.45f;
  float pin_share = 0.5f;  // of the zoom-in slots: observation-window anchors
  int min_window = 8;
};

struct BudgetPlan {
  int budget_tokens = 0;  // G
  SekvOptions sekv;       // segmenter window/min_span and expand_budget filled in
  Segmentation segmentation;
  ChunkOptions chunk;
  HeavyHitterOptions h2o;
};

// Plans all three caches for a prompt with this surprisal at budget fraction F, for a cache
// of this head_dim (it sizes the per-head summary counts that pinning adds).
BudgetPlan PlanBudget(absl::Span<const float> surprisal, double fraction, const SekvOptions& base,
                      const BudgetShares& shares, int head_dim);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_BUDGET_PLAN_H_
