// See sekv_calibration.h.
#include "common/sekv/sekv_calibration.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "common/scd/linalg.h"
#include "common/sekv/low_rank.h"

namespace scd::sekv {

RouterSampleSet::RouterSampleSet(int num_layers, int num_kv_heads, int head_dim,
                                 const CalibrationOptions& options)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      full_bilinear_(head_dim <= 16),
      options_(options),
      buckets_(static_cast<size_t>(num_layers) * num_kv_heads),
      rng_(options.seed) {
  feature_dim_ = (full_bilinear_ ? head_dim * head_dim : 1) + 3;
}

void RouterSampleSet::Add(int layer, int kv_head, const float* q, const float* kbar, int hd,
                          float log_len, float log_share, float mass) {
  Bucket& b = buckets_[static_cast<size_t>(layer) * num_kv_heads_ + kv_head];
  ++b.seen;
  const long n = static_cast<long>(b.mass.size());
  long slot = n;
  if (n >= options_.max_samples_per_head) {
    rng_ = SplitMix64Mix(rng_ + kGoldenGamma);
    slot = static_cast<long>(rng_ % static_cast<uint64_t>(b.seen));
    if (slot >= n) return;
  } else {
    b.x.resize(b.x.size() + feature_dim_);
    b.mass.push_back(0);
  }
  float* x = b.x.data() + static_cast<size_t>(slot) * feature_dim_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (full_bilinear_) {
    for (int i = 0; i < hd; ++i)
      for (int j = 0; j < hd; ++j) x[i * hd + j] = q[i] * kbar[j] * scale;
    x += hd * hd;
  } else {
    float s = 0;
    for (int i = 0; i < hd; ++i) s += q[i] * kbar[i];
    *x++ = s * scale;
  }
  x[0] = log_len;
  x[1] = log_share;
  x[2] = 1.0f;
  b.mass[slot] = mass;
}

namespace {

// L2-regularised logistic regression by Newton's method (the bias, last, is not penalised).
absl::StatusOr<std::vector<double>> FitLogistic(const std::vector<float>& x,
                                                const std::vector<uint8_t>& y, int dim, double l2,
                                                int iterations) {
  const size_t n = y.size();
  std::vector<double> w(dim, 0.0);
  std::vector<double> h(static_cast<size_t>(dim) * dim), g(dim);
  for (int it = 0; it < iterations; ++it) {
    std::fill(h.begin(), h.end(), 0.0);
    std::fill(g.begin(), g.end(), 0.0);
    for (size_t i = 0; i < n; ++i) {
      const float* xi = x.data() + i * dim;
      double z = 0;
      for (int a = 0; a < dim; ++a) z += w[a] * xi[a];
      const double p = 1.0 / (1.0 + std::exp(-z));
      const double r = p - y[i], s = std::max(p * (1 - p), 1e-9);
      for (int a = 0; a < dim; ++a) {
        g[a] += r * xi[a];
        const double sa = s * xi[a];
        double* row = h.data() + static_cast<size_t>(a) * dim;
        for (int b = a; b < dim; ++b) row[b] += sa * xi[b];
      }
    }
    for (int a = 0; a < dim; ++a) {
      for (int b = 0; b < a; ++b)
        h[static_cast<size_t>(a) * dim + b] = h[static_cast<size_t>(b) * dim + a];
      const double reg = a == dim - 1 ? 1e-8 : l2 * static_cast<double>(n);
      g[a] += reg * w[a];
      h[static_cast<size_t>(a) * dim + a] += reg;
    }
    SCD_ASSIGN_OR_RETURN(std::vector<double> step, linalg::SolveSpd(h, g, dim, 1, 0.0));
    double norm = 0;
    for (int a = 0; a < dim; ++a) {
      w[a] -= step[a];
      norm += step[a] * step[a];
    }
    if (norm < 1e-14) break;
  }
  return w;
}

// The fitted bilinear block as the gate's projections: W [hd, hd] (z = qᵀ W k̄, already
// including the 1/√d feature scale; its diagonal only unless `full`), then W = U Σ Vᵀ from the
// eigenvectors of Wᵀ W, and the top `route_dim` directions into P_q (√σ u_r) and P_k (√σ v_r).
void FactorBilinear(const std::vector<double>& w, int hd, int route_dim, bool full, float* pq,
                    float* pk) {
  std::vector<double> wm(static_cast<size_t>(hd) * hd, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  if (full) {
    for (int i = 0; i < hd * hd; ++i) wm[i] = w[i] * scale;
  } else {
    for (int i = 0; i < hd; ++i) wm[static_cast<size_t>(i) * hd + i] = w[0] * scale;
  }
  std::vector<double> wtw(static_cast<size_t>(hd) * hd, 0.0), lam, vec;
  for (int i = 0; i < hd; ++i)
    for (int j = 0; j < hd; ++j)
      for (int k = 0; k < hd; ++k)
        wtw[static_cast<size_t>(i) * hd + j] +=
            wm[static_cast<size_t>(k) * hd + i] * wm[static_cast<size_t>(k) * hd + j];
  SymmetricEigenJacobi(wtw, hd, &lam, &vec);
  for (int r = 0; r < route_dim; ++r) {
    const double sigma = std::sqrt(std::max(lam[r], 0.0));
    if (sigma <= 1e-12) continue;
    const double root = std::sqrt(sigma);
    for (int c = 0; c < hd; ++c) {
      const double vc = vec[static_cast<size_t>(c) * hd + r];
      pk[static_cast<size_t>(r) * hd + c] = static_cast<float>(root * vc);
      double u = 0;  // u_r = W v_r / σ
      for (int k = 0; k < hd; ++k)
        u += wm[static_cast<size_t>(c) * hd + k] * vec[static_cast<size_t>(k) * hd + r];
      pq[static_cast<size_t>(r) * hd + c] = static_cast<float>(root * u / sigma);
    }
  }
}

// The gate's threshold and its precision and recall on the samples.
struct GateThreshold {
  float tau = 0.5f;
  double precision = 0, recall = 0;
};

// τ: the F_β-best threshold on the sample predictions (with a target recall: the first that
// reaches it).
GateThreshold BestThreshold(const std::vector<double>& w, const std::vector<float>& x,
                            const std::vector<uint8_t>& y, int dim, size_t positives,
                            const CalibrationOptions& o) {
  const size_t n = y.size();
  std::vector<float> alpha(n);
  for (size_t i = 0; i < n; ++i) {
    const float* xi = x.data() + i * dim;
    double z = 0;
    for (int a = 0; a < dim; ++a) z += w[a] * xi[a];
    alpha[i] = Sigmoid(static_cast<float>(z));
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t c) { return alpha[a] > alpha[c]; });
  const double beta2 = static_cast<double>(o.beta) * o.beta;
  double best_f = -1;
  GateThreshold best;
  size_t tp = 0;
  for (size_t k = 0; k < n; ++k) {
    tp += y[order[k]];
    if (k + 1 < n && alpha[order[k + 1]] == alpha[order[k]]) continue;
    const double prec = static_cast<double>(tp) / (k + 1),
                 rec = static_cast<double>(tp) / positives;
    double f = prec + rec > 0 ? (1 + beta2) * prec * rec / (beta2 * prec + rec) : 0;
    if (o.target_recall > 0) f = rec >= o.target_recall && best_f < 0 ? 1.0 : -1.0;
    if (f > best_f) {
      best_f = f;
      best.precision = prec;
      best.recall = rec;
      best.tau = k + 1 < n ? 0.5f * (alpha[order[k]] + alpha[order[k + 1]]) : 0.0f;
    }
  }
  return best;
}

// The gate of layer l, KV head g fitted on its samples; its line of the report.
absl::StatusOr<nlohmann::json> FitHead(const RouterSampleSet& set, const CalibrationOptions& o,
                                       int route_dim, int l, int g, ZoomRouter* router) {
  const int hd = set.head_dim(), dim = set.feature_dim();
  const auto& b = set.bucket(l, g);
  const size_t n = b.mass.size();
  std::vector<uint8_t> y(n);
  size_t positives = 0;
  for (size_t i = 0; i < n; ++i) positives += y[i] = b.mass[i] > o.label_threshold;
  RouterGate& gate = router->gate(l, g);
  nlohmann::json hr = {{"layer", l}, {"kv_head", g}, {"samples", n}, {"positives", positives}};
  if (n == 0 || positives == 0 || positives == n) {
    // Nothing to learn from: keep the default share gate.
    gate.w_share = 1;
    gate.bias = -std::log(o.label_threshold);
    gate.tau = 0.5f;
    hr["fit"] = "default (one class only)";
    return hr;
  }
  SCD_ASSIGN_OR_RETURN(std::vector<double> w, FitLogistic(b.x, y, dim, o.l2, o.newton_iterations));
  FactorBilinear(w, hd, route_dim, set.full_bilinear(), router->p_q(l, g), router->p_k(l, g));
  gate.w_size = static_cast<float>(w[dim - 3]);
  gate.w_share = static_cast<float>(w[dim - 2]);
  gate.bias = static_cast<float>(w[dim - 1]);
  const GateThreshold best = BestThreshold(w, b.x, y, dim, positives, o);
  gate.tau = std::clamp(best.tau, 0.0f, 1.0f);
  hr["fit"] = "logistic";
  hr["tau"] = gate.tau;
  hr["precision"] = best.precision;
  hr["recall"] = best.recall;
  hr["target_recall"] = o.target_recall;
  hr["w_size"] = gate.w_size;
  hr["w_share"] = gate.w_share;
  hr["bias"] = gate.bias;
  return hr;
}

}  // namespace

absl::StatusOr<ZoomRouter> FitZoomRouter(const RouterSampleSet& set, const CalibrationOptions& o,
                                         nlohmann::json* report) {
  const int hd = set.head_dim();
  const int route_dim = o.route_dim > 0 ? std::min(o.route_dim, hd) : std::min(hd, 32);
  ZoomRouter router;
  router.Reset(set.num_layers(), set.num_kv_heads(), hd, route_dim);
  nlohmann::json heads = nlohmann::json::array();
  for (int l = 0; l < set.num_layers(); ++l) {
    for (int g = 0; g < set.num_kv_heads(); ++g) {
      SCD_ASSIGN_OR_RETURN(nlohmann::json hr, FitHead(set, o, route_dim, l, g, &router));
      heads.push_back(hr);
    }
  }
  SCD_RETURN_IF_ERROR(router.Validate());
  if (report != nullptr) {
    *report = {{"label_threshold", o.label_threshold},
               {"route_dim", route_dim},
               {"features", set.full_bilinear() ? "bilinear q k^T, log|S|, log-share, 1"
                                                : "q.k/sqrt(d), log|S|, log-share, 1"},
               {"beta", o.beta},
               {"l2", o.l2},
               {"heads", heads}};
  }
  return router;
}

absl::Status CollectRouterSamples(Backend& consumer, SekvDecoder& decoder,
                                  const std::vector<std::vector<int32_t>>& sequences,
                                  const CalibrationRun& run, RouterSampleSet* set) {
  int used = 0;
  const CacheShape shape = decoder.shape();
  std::vector<float> logits;
  for (const auto& ids : sequences) {
    if (used >= run.max_sequences) break;
    const int t = std::min<int>(static_cast<int>(ids.size()), run.context);
    const int p = std::min(run.prefix, t - 1);
    if (p < 8) continue;
    SCD_ASSIGN_OR_RETURN(auto seq, consumer.NewSequence(p));
    PrefillOptions po;
    po.layer_states = po.surprisal = true;
    PrefillResult pr;
    SCD_RETURN_IF_ERROR(consumer.Prefill(*seq, absl::MakeConstSpan(ids).first(p), po, &pr));
    SCD_ASSIGN_OR_RETURN(PrefixKv prefix, decoder.MakePrefix(pr.layers, p, pr.surprisal));
    const BudgetPlan plan =
        PlanBudget(prefix.surprisal, run.budget, run.base, run.shares, shape.head_dim);
    SCD_ASSIGN_OR_RETURN(
        auto cache, SekvCache::CreateWithSegmentation(shape, prefix, plan.segmentation, plan.sekv,
                                                      nullptr, set));
    for (int i = p; i < t; ++i) {
      SCD_RETURN_IF_ERROR(decoder.Step(ids[i], i, *cache, &logits));
    }
    ++used;
  }
  if (used == 0) return absl::InvalidArgumentError("no calibration sequence was long enough");
  return absl::OkStatus();
}

}  // namespace scd::sekv
