// See patch_aligner.h. Forward and backward passes are a handful of sgemm calls per
// minibatch; the gradient of L with respect to Ĥ is (2 / (B·g)) (Ĥ − H) Gᵀ G.
#include "common/scd/patch_aligner.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace scd {
namespace {

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// C[m, n] (+)= A[m, k] · B[k, n] with optional transposes (row-major, leading dims implied).
void Gemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float* c,
          float beta) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

struct Adam {
  std::vector<float> m, v;
  void Step(std::vector<float>& p, const std::vector<float>& g, float lr, int t, float wd) {
    if (m.empty()) m.assign(p.size(), 0.0f), v.assign(p.size(), 0.0f);
    const float b1 = 0.9f, b2 = 0.999f;
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(t));
    const float c2 = 1.0f - std::pow(b2, static_cast<float>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      p[i] -= lr * ((m[i] / c1) / (std::sqrt(v[i] / c2) + 1e-8f) + wd * p[i]);
    }
  }
};

// Mean over rows of ‖(h − target) Gᵀ‖² / g.
double KvLoss(const PatchAligner& f, const float* z, const float* target, int rows,
              const std::vector<float>& kv_proj, int g) {
  std::vector<float> h(static_cast<size_t>(rows) * f.out_dim), p(static_cast<size_t>(rows) * g);
  f.Apply(z, rows, h.data());
  for (size_t i = 0; i < h.size(); ++i) h[i] -= target[i];
  Gemm(false, true, rows, g, f.out_dim, h.data(), kv_proj.data(), p.data(), 0.0f);
  double s = 0;
  for (float x : p) s += double(x) * x;
  return s / (double(rows) * g);
}

// The aligner at its start: the linear decoder (A, c), no nonlinear correction (W₂, b₁, b₂
// zero) and W₁ drawn so that W₁ z has unit variance per unit, codes having per-component scale.
PatchAligner InitialAligner(const std::vector<float>& z, int n, const LinearCode& linear, int m,
                            std::mt19937_64& rng) {
  const int r = linear.rank, d = linear.out_dim;
  PatchAligner f;
  f.code_dim = r;
  f.hidden_dim = m;
  f.out_dim = d;
  f.a = linear.decoder;
  f.c = linear.mu_out;
  f.b1.assign(m, 0.0f);
  f.w2.assign(static_cast<size_t>(m) * d, 0.0f);
  f.b2.assign(d, 0.0f);
  f.w1.resize(static_cast<size_t>(r) * m);
  std::vector<double> var(r, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < r; ++j)
      var[j] += double(z[static_cast<size_t>(i) * r + j]) * z[static_cast<size_t>(i) * r + j];
  double total_var = 0;
  for (double v : var) total_var += v / n;
  std::normal_distribution<float> normal(
      0.0f, static_cast<float>(1.0 / std::sqrt(std::max(total_var, 1e-12))));
  for (float& w : f.w1) w = normal(rng);
  return f;
}

// The training rows (z, h_c) in a shuffled order: minibatches are drawn from the first ones,
// the last ones are held out.
struct ShuffledRows {
  const std::vector<float>& z;
  const std::vector<float>& h;
  int r, d;
  std::vector<int> order;

  // Rows [begin, begin + count) of the order into *zs and *hs.
  void Gather(int begin, int count, std::vector<float>* zs, std::vector<float>* hs) const {
    zs->resize(static_cast<size_t>(count) * r);
    hs->resize(static_cast<size_t>(count) * d);
    for (int i = 0; i < count; ++i) {
      const int src = order[begin + i];
      std::copy_n(z.begin() + static_cast<size_t>(src) * r, r,
                  zs->begin() + static_cast<size_t>(i) * r);
      std::copy_n(h.begin() + static_cast<size_t>(src) * d, d,
                  hs->begin() + static_cast<size_t>(i) * d);
    }
  }
};

// Minibatch steps of Adam on the aligner's KV loss, with a cosine-decayed learning rate: the
// buffers of the forward and backward passes for batches of `b` rows, and the optimiser's state.
class AlignerTrainer {
 public:
  AlignerTrainer(const PatchAligner& f, int b, int g)
      : b_(b),
        g_(g),
        u_(static_cast<size_t>(b) * f.hidden_dim),
        s_(u_.size()),
        y_(static_cast<size_t>(b) * f.out_dim),
        p_(static_cast<size_t>(b) * g),
        gy_(y_.size()),
        ds_(u_.size()),
        ga_(f.a.size()),
        gc_(f.out_dim),
        gw1_(f.w1.size()),
        gb1_(f.hidden_dim),
        gw2_(f.w2.size()),
        gb2_(f.out_dim) {}

  // Step `step` (from 1) of `steps` on the minibatch (zb, hb).
  void Step(PatchAligner& f, const std::vector<float>& zb, const std::vector<float>& hb,
            const std::vector<float>& kv_proj, int step, const AlignerTrainOptions& o) {
    Forward(f, zb, hb, kv_proj);
    Backward(f, zb);
    const float lr = o.learning_rate * 0.5f * (1.0f + std::cos(3.14159265f * step / o.steps));
    adam_a_.Step(f.a, ga_, lr, step, o.weight_decay);
    adam_c_.Step(f.c, gc_, lr, step, 0.0f);
    adam_w1_.Step(f.w1, gw1_, lr, step, o.weight_decay);
    adam_b1_.Step(f.b1, gb1_, lr, step, 0.0f);
    adam_w2_.Step(f.w2, gw2_, lr, step, o.weight_decay);
    adam_b2_.Step(f.b2, gb2_, lr, step, 0.0f);
  }

 private:
  // The error y = f(zb) − hb, and dL/dy = 2/(b g) · (y Gᵀ) G into gy_.
  void Forward(const PatchAligner& f, const std::vector<float>& zb, const std::vector<float>& hb,
               const std::vector<float>& kv_proj) {
    const int b = b_, g = g_, r = f.code_dim, m = f.hidden_dim, d = f.out_dim;
    for (int i = 0; i < b; ++i) {
      std::copy(f.b1.begin(), f.b1.end(), u_.begin() + static_cast<size_t>(i) * m);
      for (int j = 0; j < d; ++j) y_[static_cast<size_t>(i) * d + j] = f.c[j] + f.b2[j];
    }
    Gemm(false, false, b, m, r, zb.data(), f.w1.data(), u_.data(), 1.0f);
    for (size_t i = 0; i < u_.size(); ++i) s_[i] = u_[i] * Sigmoid(u_[i]);
    Gemm(false, false, b, d, r, zb.data(), f.a.data(), y_.data(), 1.0f);
    Gemm(false, false, b, d, m, s_.data(), f.w2.data(), y_.data(), 1.0f);
    for (size_t i = 0; i < y_.size(); ++i) y_[i] -= hb[i];
    Gemm(false, true, b, g, d, y_.data(), kv_proj.data(), p_.data(), 0.0f);
    Gemm(false, false, b, d, g, p_.data(), kv_proj.data(), gy_.data(), 0.0f);
    const float scale = 2.0f / (static_cast<float>(b) * g);
    for (float& x : gy_) x *= scale;
  }

  // The parameters' gradients from gy_.
  void Backward(const PatchAligner& f, const std::vector<float>& zb) {
    const int b = b_, r = f.code_dim, m = f.hidden_dim, d = f.out_dim;
    Gemm(true, false, r, d, b, zb.data(), gy_.data(), ga_.data(), 0.0f);
    Gemm(true, false, m, d, b, s_.data(), gy_.data(), gw2_.data(), 0.0f);
    std::fill(gc_.begin(), gc_.end(), 0.0f);
    for (int i = 0; i < b; ++i)
      for (int j = 0; j < d; ++j) gc_[j] += gy_[static_cast<size_t>(i) * d + j];
    gb2_ = gc_;
    Gemm(false, true, b, m, d, gy_.data(), f.w2.data(), ds_.data(), 0.0f);
    for (size_t i = 0; i < ds_.size(); ++i) {
      const float sg = Sigmoid(u_[i]);
      ds_[i] *= sg * (1.0f + u_[i] * (1.0f - sg));
    }
    Gemm(true, false, r, m, b, zb.data(), ds_.data(), gw1_.data(), 0.0f);
    std::fill(gb1_.begin(), gb1_.end(), 0.0f);
    for (int i = 0; i < b; ++i)
      for (int j = 0; j < m; ++j) gb1_[j] += ds_[static_cast<size_t>(i) * m + j];
  }

  const int b_, g_;
  std::vector<float> u_, s_, y_, p_, gy_, ds_;
  std::vector<float> ga_, gc_, gw1_, gb1_, gw2_, gb2_;
  Adam adam_a_, adam_c_, adam_w1_, adam_b1_, adam_w2_, adam_b2_;
};

}  // namespace

void PatchAligner::Apply(const float* z, int rows, float* h) const {
  std::vector<float> u(static_cast<size_t>(rows) * hidden_dim);
  for (int r = 0; r < rows; ++r) {
    std::copy(c.begin(), c.end(), h + static_cast<size_t>(r) * out_dim);
    for (int j = 0; j < out_dim; ++j) h[static_cast<size_t>(r) * out_dim + j] += b2[j];
    std::copy(b1.begin(), b1.end(), u.begin() + static_cast<size_t>(r) * hidden_dim);
  }
  Gemm(false, false, rows, out_dim, code_dim, z, a.data(), h, 1.0f);
  if (hidden_dim == 0) return;
  Gemm(false, false, rows, hidden_dim, code_dim, z, w1.data(), u.data(), 1.0f);
  for (float& x : u) x = x * Sigmoid(x);
  Gemm(false, false, rows, out_dim, hidden_dim, u.data(), w2.data(), h, 1.0f);
}

absl::StatusOr<PatchAligner> TrainPatchAligner(
    const std::vector<float>& z, const std::vector<float>& h_c, int n, const LinearCode& linear,
    const std::vector<float>& kv_proj, int g, const AlignerTrainOptions& o, AlignerReport* report) {
  const int r = linear.rank, d = linear.out_dim, m = o.hidden_dim;
  if (n < 8) return absl::FailedPreconditionError("aligner training needs at least 8 states");
  if (z.size() != static_cast<size_t>(n) * r || h_c.size() != static_cast<size_t>(n) * d ||
      kv_proj.size() != static_cast<size_t>(g) * d) {
    return absl::InvalidArgumentError("aligner training data has inconsistent shapes");
  }
  std::mt19937_64 rng(o.seed);
  PatchAligner f = InitialAligner(z, n, linear, m, rng);

  // Split rows into train / held-out.
  ShuffledRows rows{z, h_c, r, d, std::vector<int>(n)};
  std::iota(rows.order.begin(), rows.order.end(), 0);
  std::shuffle(rows.order.begin(), rows.order.end(), rng);
  const int held = std::max(1, static_cast<int>(n * o.holdout));
  const int train = n - held;
  std::vector<float> z_held, h_held;
  rows.Gather(train, held, &z_held, &h_held);

  AlignerReport rep;
  rep.linear_loss = KvLoss(f, z_held.data(), h_held.data(), held, kv_proj, g);
  {
    PatchAligner mean_only = f;
    std::fill(mean_only.a.begin(), mean_only.a.end(), 0.0f);
    rep.target_energy = KvLoss(mean_only, z_held.data(), h_held.data(), held, kv_proj, g);
  }
  PatchAligner best = f;
  double best_loss = rep.linear_loss;

  const int b = std::min(o.batch, train);
  std::vector<float> zb, hb;
  AlignerTrainer trainer(f, b, g);
  std::uniform_int_distribution<int> pick(0, train - b);
  const int eval_every = std::max(1, o.steps / 20);
  for (int step = 1; step <= o.steps; ++step) {
    rows.Gather(pick(rng), b, &zb, &hb);
    trainer.Step(f, zb, hb, kv_proj, step, o);
    if (step % eval_every == 0 || step == o.steps) {
      const double loss = KvLoss(f, z_held.data(), h_held.data(), held, kv_proj, g);
      if (!std::isfinite(loss)) break;
      if (loss < best_loss) {
        best_loss = loss;
        best = f;
      }
    }
  }
  rep.trained_loss = best_loss;
  if (report != nullptr) *report = rep;
  return best;
}

}  // namespace scd
