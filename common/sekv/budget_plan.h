// Budget planning: turns a GPU budget F (GPU-tier bytes as a fraction of a full KV cache of
// the prompt) into each cache's parameters, so that SEKV and both baselines are compared at
// the same memory. Everything is counted in token-equivalents per (layer, KV head): a full
// token, an anchor, a span summary and a slot of the expanded-span cache each hold one K and
// one V row of head_dim floats, so G = floor(F · T) − 1 of them fit (one kept in reserve for
// the summaries' log|S| floats and the row the window gains at the first decode step).
//
// SEKV: window W = window_share · G (at least min_window), zoom-in slots B =
// expand_share · G, and the segmentation must fit anchors + summaries into G − W − B: the
// minimum span length is raised until it does (fewer, longer spans; zoom-in recovers the
// detail). Whatever is left over goes to B too. B is then split: pin_share · B slots hold the
// observation-window anchors chosen at the first decode step (sekv_cache.h), the rest is
// the expansion buffer of the per-step zoom-in. With pins, each KV head keeps its own count of
// the tokens each summary stands for (one float per span and head): ⌈spans / (2·head_dim)⌉
// token-equivalents, reserved before the split.
// A tier that holds more than these rows (GpuSekv's device tier: its counts, the device
// zoom's tables, flags and scratch; rows of another element type than the full cache's) states
// it in a TierOverhead, and the SEKV plan then fits rows and overheads together into G: the
// minimum span length rises until anchors, summaries, window and the spans' overheads leave
// room for the zoom-in, whose slots are then sized with their own overhead.
// Chunk summaries: the same window; every other slot is a chunk summary: G − sinks − W
// near-equal chunks over the T − sinks − W middle tokens.
// Heavy hitters: G tokens kept (sinks + hits + the same window).
#ifndef SCD_COMMON_SEKV_BUDGET_PLAN_H_
#define SCD_COMMON_SEKV_BUDGET_PLAN_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/sekv/chunk_cache.h"
#include "common/sekv/h2o_cache.h"
#include "common/sekv/sekv_cache.h"

namespace scd::sekv {

// The GPU budget F, in one place: its default (the decode daemon's `sekv.budget`, the
// evaluation's and the calibration's) and its range, which the daemon's config reader, the
// decode engine and the evaluation all check through CheckBudget.
inline constexpr double kDefaultBudget = 0.4;
inline constexpr double kMinBudget = 0.01;
inline constexpr double kMaxBudget = 1.0;

// OK when `fraction` is in [kMinBudget, kMaxBudget]; otherwise InvalidArgument.
absl::Status CheckBudget(double fraction);

struct BudgetShares {
  float window_share = 0.2f;
  float expand_share = 0.45f;
  float pin_share = 0.5f;  // of the zoom-in slots: observation-window anchors
  int min_window = 8;
};

// What a tier holds beyond one K/V row per entry, in token-equivalents of the full cache (one
// position's K and V rows of a layer and KV head in the full cache's element type), per layer
// and KV head. The default is the host tier, which holds exactly the rows the plan counts
// (and, with pins, the per-head counts it reserves for).
struct TierOverhead {
  double row = 1;                // one row of the tier (2: F32 rows against a BF16 full cache)
  double per_span = 0;           // per span: counts, tables
  double per_span_token = 0;     // per token inside a span: flags
  double per_zoom_slot = 0;      // per expansion slot, beyond its row: the zoom-in's scratch
  double fixed = 0;              // once
  bool counts_included = false;  // per_span holds the per-head counts (no reserve for them)
};

struct BudgetPlan {
  int budget_tokens = 0;  // G
  SekvOptions sekv;       // segmenter window/min_span and expand_budget filled in
  Segmentation segmentation;
  ChunkOptions chunk;
  HeavyHitterOptions h2o;
};

// Plans all three caches for a prompt with this surprisal at budget fraction F, for a cache
// of this head_dim (it sizes the per-head summary counts that pinning adds); the SEKV cache's
// GPU tier as `tier` holds it.
BudgetPlan PlanBudget(absl::Span<const float> surprisal, double fraction, const SekvOptions& base,
                      const BudgetShares& shares, int head_dim,
                      const TierOverhead& tier = TierOverhead{});

// The most host memory a SekvCache planned by PlanBudget at `fraction` can hold for a prefix
// of `prompt_tokens` positions, whatever the prompt's surprisal (so before it is known: the
// decode engine reserves it when it admits a SEKV request, DecodeEngine::Submit). In bytes of
// SekvCache::Memory(), whose rows are F32:
//   gpu_tier  its gpu(): PlanBudget fits the anchors, summaries, window, pins and expansion
//             slots into G = max(sinks + 1, floor(F·T) - 1) token-equivalents per layer and KV
//             head, a tier's row is at least one, and where even the plan's last segmentation
//             does not fit (sinks, one span and the window) the rows pass G by one: at most
//             max(F·T, sinks + 2) rows; besides them, per span and layer, log|S| and one count
//             per KV head (a span per position at most);
//   cpu_tier  its cpu_bases: a span of n tokens keeps per KV head a K and a V basis of at most
//             MaxBasisFloats(n, d, r_max) = min(r_max, n, d)·(n + d) floats each (low_rank.h),
//             which per token is largest at n = m = min(r_max, d): m + d floats against the
//             full cache's d. So at most (m + d)/d times the prompt's K/V in F32 (1.25 at
//             head_dim 128 and r_max 32; 2 at head_dim 8). 0 without zoom-in or CPU tier.
// Not counted: the window's rows for positions to come (SekvOptions::generated_reserve).
struct HostBound {
  size_t gpu_tier = 0;
  size_t cpu_tier = 0;
  size_t total() const { return gpu_tier + cpu_tier; }
};
HostBound MaxHostBytes(const CacheShape& shape, const SekvOptions& options, double fraction,
                       int64_t prompt_tokens);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_BUDGET_PLAN_H_
