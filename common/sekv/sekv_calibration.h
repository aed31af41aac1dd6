// Router calibration (SeKV "zoom-in": the routing projections and thresholds are fitted
// offline on the consumer with the full KV cache as teacher; docs/METHOD.md "SEKV" allows a
// logistic-regression fit on teacher attention-mass labels as the first version).
//
// Samples: the consumer decodes calibration text teacher-forced through a SekvCache in
// teacher mode (sekv_cache.h), so the hidden states follow the full cache. At every step,
// layer and query head, each span S gives one sample:
//   features x = [vec(q k̄_Sᵀ)/√d (head_dim² terms, or the single <q, k̄_S>/√d when
//                 head_dim > 16), log|S|, ŝ_S − LSE, 1]
//   label    y = 1 when the teacher's attention mass on S, Σ_{t∈S} p_t, exceeds
//                 label_threshold (a "significant share").
// Fit, per (layer, KV head): L2-regularised logistic regression by Newton's method (IRLS),
// then W (the bilinear block) is factored W = U Σ Vᵀ → P_q = Σ^½ Uᵀ, P_k = Σ^½ Vᵀ (rank
// route_dim), so <P_q q, P_k k̄> = qᵀ W k̄. The threshold τ is the highest one whose recall
// on the samples reaches target_recall (a missed span costs more than a spare expansion: the
// expansion buffer is paid for in the GPU budget anyway, and the budget ranks candidates by
// α), or, with target_recall = 0, the one that maximises F_β.
#ifndef SCD_COMMON_SEKV_SEKV_CALIBRATION_H_
#define SCD_COMMON_SEKV_SEKV_CALIBRATION_H_

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/sekv_decoder.h"
#include "common/sekv/zoom_router.h"

namespace scd::sekv {

struct CalibrationOptions {
  float label_threshold = 0.05f;
  int max_samples_per_head = 20000;  // reservoir sample per (layer, KV head)
  double l2 = 1e-2;
  int route_dim = 0;  // 0 = head_dim, capped at 32
  int newton_iterations = 25;
  float beta = 2.0f;
  // > 0: τ is the highest threshold whose recall reaches this (the budget then ranks the
  // candidates by α); 0: τ maximises F_β.
  float target_recall = 0.95f;
  uint64_t seed = 1;
};

// Collects samples per (layer, KV head) with reservoir sampling.
class RouterSampleSet : public RouterSampleSink {
 public:
  RouterSampleSet(int num_layers, int num_kv_heads, int head_dim,
                  const CalibrationOptions& options);
  void Add(int layer, int kv_head, const float* q, const float* summary_k, int head_dim,
           float log_len, float log_share, float mass) override;

  int feature_dim() const { return feature_dim_; }
  bool full_bilinear() const { return full_bilinear_; }
  struct Bucket {
    std::vector<float> x;  // [n, feature_dim]
    std::vector<float> mass;
    long seen = 0;
  };
  const Bucket& bucket(int l, int g) const {
    return buckets_[static_cast<size_t>(l) * num_kv_heads_ + g];
  }
  int num_layers() const { return num_layers_; }
  int num_kv_heads() const { return num_kv_heads_; }
  int head_dim() const { return head_dim_; }

 private:
  int num_layers_, num_kv_heads_, head_dim_, feature_dim_;
  bool full_bilinear_;
  CalibrationOptions options_;
  std::vector<Bucket> buckets_;
  uint64_t rng_;
};

// Fits the router from the samples; `report` (optional) receives per-head fit statistics.
absl::StatusOr<ZoomRouter> FitZoomRouter(const RouterSampleSet& samples,
                                         const CalibrationOptions& options,
                                         nlohmann::json* report = nullptr);

struct CalibrationRun {
  double budget = kDefaultBudget;  // plan the segmentation as the evaluation will at this budget
  int context = 512;               // tokens per calibration sequence
  int prefix = 384;                // prompt part (compressed); the rest is decoded teacher-forced
  int max_sequences = 48;
  BudgetShares shares;
  SekvOptions base;
};

// Runs the teacher over `sequences` (token ids, BOS first) on `consumer` and collects the
// samples into `set`. Each sequence's first `prefix` tokens are prefilled (giving the K/V
// and surprisal), then up to context − prefix tokens are decoded teacher-forced.
absl::Status CollectRouterSamples(Backend& consumer, SekvDecoder& decoder,
                                  const std::vector<std::vector<int32_t>>& sequences,
                                  const CalibrationRun& run, RouterSampleSet* set);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SEKV_CALIBRATION_H_
