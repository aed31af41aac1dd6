// See low_rank.h.
#include "common/sekv/low_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace scd::sekv {

void BasisArena::Reserve(size_t floats) {
  if (!blocks_.empty() && blocks_.back().capacity - blocks_.back().used >= floats) return;
  blocks_.push_back({NewFloatsWithHugePages(floats), 0, floats});
}

float* BasisArena::Allocate(size_t n) {
  if (n == 0) return nullptr;
  if (blocks_.empty() || blocks_.back().capacity - blocks_.back().used < n) {
    Reserve(std::max(n, kBlockFloats));
  }
  Owned& b = blocks_.back();
  float* p = b.data.get() + b.used;
  b.used += n;
  allocated_ += n;
  return p;
}

std::vector<BasisArena::Block> BasisArena::blocks() const {
  std::vector<Block> out;
  for (const Owned& b : blocks_) {
    if (b.used > 0) out.push_back({b.data.get(), b.used});
  }
  return out;
}

namespace {

// The most rank TruncatedSvd keeps for an [n, d] block.
int RankCap(int n, int d, int r_max) { return std::max(1, std::min({r_max, n, d})); }

}  // namespace

size_t MaxBasisFloats(int n, int d, int r_max) {
  return static_cast<size_t>(RankCap(n, d, r_max)) * (static_cast<size_t>(n) + d);
}

void LowRankBasis::Reconstruct(float* out, int out_stride) const {
  for (int i = 0; i < rows; ++i) {
    float* o = out + static_cast<size_t>(i) * out_stride;
    std::fill(o, o + cols, 0.0f);
    for (int j = 0; j < rank; ++j) {
      const float a = us[static_cast<size_t>(i) * rank + j];
      const float* v = vt + static_cast<size_t>(j) * cols;
      for (int c = 0; c < cols; ++c) o[c] += a * v[c];
    }
  }
}

void LowRankBasis::ReconstructRow(int i, float* out) const {
  std::fill(out, out + cols, 0.0f);
  for (int j = 0; j < rank; ++j) {
    const float a = us[static_cast<size_t>(i) * rank + j];
    const float* v = vt + static_cast<size_t>(j) * cols;
    for (int c = 0; c < cols; ++c) out[c] += a * v[c];
  }
}

namespace {

// Sorts the eigenpairs in `d` (eigenvalues) and `zt` (eigenvector j in zt[j n .. j n + n), that
// is column-major) by descending eigenvalue into values and vectors (ties keep their order).
void SortEigenpairs(const std::vector<double>& d, const std::vector<double>& zt, int n,
                    std::vector<int>& order, std::vector<double>* values,
                    std::vector<double>* vectors) {
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return d[x] > d[y]; });
  values->resize(n);
  vectors->resize(static_cast<size_t>(n) * n);
  for (int j = 0; j < n; ++j) {
    (*values)[j] = d[order[j]];
    for (int i = 0; i < n; ++i) {
      (*vectors)[static_cast<size_t>(i) * n + j] = zt[static_cast<size_t>(order[j]) * n + i];
    }
  }
}

// Scratch space of one thread's decompositions: SpanStore::Build runs tens of thousands of them
// per layer (every span and KV head, keys and values), mostly of orders 5 to 40, where fresh
// buffers per call cost as much as the arithmetic. The eigenvector matrices are kept
// column-major (zt), so that a rotation of two columns runs over contiguous memory.
struct EigenScratch {
  std::vector<double> original, d, e, zt, v, p, acc;
  std::vector<int> order;
};

// Cyclic Jacobi on `a` (destroyed).
void JacobiWith(std::vector<double>& a, int n, EigenScratch& ws, std::vector<double>* values,
                std::vector<double>* vectors) {
  std::vector<double>& v = ws.zt;  // column-major
  v.assign(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i) * n + i] = 1.0;
  auto at = [&](int i, int j) -> double& { return a[static_cast<size_t>(i) * n + j]; };
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0, diag = 0;
    for (int i = 0; i < n; ++i) {
      diag += at(i, i) * at(i, i);
      for (int j = i + 1; j < n; ++j) off += at(i, j) * at(i, j);
    }
    if (off <= 1e-30 * std::max(diag, 1e-300) || off == 0) break;
    for (int p = 0; p < n; ++p) {
      for (int q = p + 1; q < n; ++q) {
        const double apq = at(p, q);
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (at(q, q) - at(p, p)) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // columns p, q
          const double akp = at(k, p), akq = at(k, q);
          at(k, p) = c * akp - s * akq;
          at(k, q) = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // rows p, q
          const double apk = at(p, k), aqk = at(q, k);
          at(p, k) = c * apk - s * aqk;
          at(q, k) = s * apk + c * aqk;
        }
        double* vp = v.data() + static_cast<size_t>(p) * n;
        double* vq = v.data() + static_cast<size_t>(q) * n;
        for (int k = 0; k < n; ++k) {
          const double vkp = vp[k], vkq = vq[k];
          vp[k] = c * vkp - s * vkq;
          vq[k] = s * vkp + c * vkq;
        }
      }
    }
  }
  ws.d.resize(n);
  for (int i = 0; i < n; ++i) ws.d[i] = at(i, i);
  SortEigenpairs(ws.d, v, n, ws.order, values, vectors);
}

}  // namespace

void SymmetricEigenJacobi(std::vector<double> a, int n, std::vector<double>* values,
                          std::vector<double>* vectors) {
  EigenScratch ws;
  JacobiWith(a, n, ws, values, vectors);
}

namespace {

// Householder reduction of the symmetric a [n, n] (row-major; destroyed) to a tridiagonal T =
// Qᵀ a Q: diagonal d [n], off-diagonal e [n] (e[i] couples i and i + 1; e[n - 1] = 0), and Q
// [n, n] (column-major; all three in `ws`). Step k reflects rows and columns k + 1.. so that column
// k below its first sub-diagonal entry becomes zero: with v = x - α e₁ (x that part of column k, α
// = -sign(x₀) |x|) and β = 2 / vᵀv, the trailing block B becomes H B H = B - v wᵀ - w vᵀ, where p =
// β B v and w = p - (β vᵀp / 2) v; Q accumulates Q H.
void Tridiagonalize(std::vector<double>& a, int n, EigenScratch& ws) {
  auto at = [&](int i, int j) -> double& { return a[static_cast<size_t>(i) * n + j]; };
  std::vector<double>* d = &ws.d;
  std::vector<double>* e = &ws.e;
  std::vector<double>& qt = ws.zt;
  qt.assign(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) qt[static_cast<size_t>(i) * n + i] = 1.0;
  std::vector<double>& v = ws.v;
  std::vector<double>& p = ws.p;
  std::vector<double>& acc = ws.acc;
  v.resize(n);
  p.resize(n);
  // The loops are arranged so that the innermost one runs over contiguous memory and
  // independent sums.
  for (int k = 0; k + 2 < n; ++k) {
    const int m = n - k - 1;  // rows k + 1 .. n - 1
    double tail = 0;
    for (int i = 1; i < m; ++i) tail += at(k + 1 + i, k) * at(k + 1 + i, k);
    if (tail == 0) continue;  // column k is tridiagonal already
    const double x0 = at(k + 1, k);
    const double alpha = (x0 >= 0 ? -1.0 : 1.0) * std::sqrt(x0 * x0 + tail);
    for (int i = 0; i < m; ++i) v[i] = at(k + 1 + i, k);
    v[0] -= alpha;
    const double beta = 2.0 / (v[0] * v[0] + tail);
    acc.assign(m, 0.0);  // Σ_j B[i][j] v[j], with B[j][i] for B[i][j] (B is symmetric)
    for (int j = 0; j < m; ++j) {
      const double vj = v[j];
      const double* bj = &at(k + 1 + j, k + 1);
      for (int i = 0; i < m; ++i) acc[i] += bj[i] * vj;
    }
    double vp = 0;
    for (int i = 0; i < m; ++i) {
      p[i] = beta * acc[i];
      vp += v[i] * p[i];
    }
    const double half = 0.5 * beta * vp;
    for (int i = 0; i < m; ++i) p[i] -= half * v[i];  // p is now w
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) at(k + 1 + i, k + 1 + j) -= v[i] * p[j] + p[i] * v[j];
    }
    at(k + 1, k) = at(k, k + 1) = alpha;
    for (int i = 1; i < m; ++i) at(k + 1 + i, k) = at(k, k + 1 + i) = 0;
    acc.assign(n, 0.0);  // row r of Q times v
    for (int j = 0; j < m; ++j) {
      const double* col = qt.data() + static_cast<size_t>(k + 1 + j) * n;
      const double vj = v[j];
      for (int r = 0; r < n; ++r) acc[r] += col[r] * vj;
    }
    for (int r = 0; r < n; ++r) acc[r] *= beta;
    for (int j = 0; j < m; ++j) {
      double* col = qt.data() + static_cast<size_t>(k + 1 + j) * n;
      const double vj = v[j];
      for (int r = 0; r < n; ++r) col[r] -= acc[r] * vj;
    }
  }
  d->resize(n);
  e->assign(n, 0.0);
  for (int i = 0; i < n; ++i) (*d)[i] = at(i, i);
  for (int i = 0; i + 1 < n; ++i) (*e)[i] = at(i + 1, i);
}

// √(a² + b²) without glibc's hypot, which costs as much as the rest of a QL step on the small
// matrices here: the plain formula is within an ulp of it wherever a² + b² neither underflows
// nor overflows, and hypot takes the rest.
double Hypot(double a, double b) {
  const double sq = a * a + b * b;
  if (sq > 1e-290 && sq < 1e290) return std::sqrt(sq);
  return std::hypot(a, b);
}

// Eigenvalues of the tridiagonal (d, e) into d, by QL iterations with implicit Wilkinson-type
// shifts, each a chase of Givens rotations from the bottom of the unreduced block up; the
// rotations are applied to the columns of z [n, n] (held column-major in zt), which therefore
// turns from Q into Q times T's eigenvectors. False when a block does not converge in 60
// iterations.
bool TridiagonalQl(std::vector<double>& d, std::vector<double>& e, int n, std::vector<double>& zt) {
  const double eps = std::numeric_limits<double>::epsilon();
  for (int l = 0; l < n; ++l) {
    for (int iter = 0;; ++iter) {
      int m = l;  // the block l..m: e[m] negligible
      for (; m + 1 < n; ++m) {
        const double dd = std::fabs(d[m]) + std::fabs(d[m + 1]);
        if (std::fabs(e[m]) <= eps * dd) break;
      }
      if (m == l) break;
      if (iter == 60) return false;
      // The shift: the eigenvalue of the leading 2x2 of the block closer to d[l].
      double g = (d[l + 1] - d[l]) / (2.0 * e[l]);
      double r = Hypot(g, 1.0);
      g = d[m] - d[l] + e[l] / (g + (g >= 0 ? r : -r));
      double s = 1, c = 1, p = 0;
      int i = m - 1;
      bool deflated = false;
      for (; i >= l; --i) {
        const double f = s * e[i], b = c * e[i];
        r = Hypot(f, g);
        e[i + 1] = r;
        if (r == 0) {  // underflow: the block splits here
          d[i + 1] -= p;
          e[m] = 0;
          deflated = true;
          break;
        }
        s = f / r;
        c = g / r;
        g = d[i + 1] - p;
        r = (d[i] - g) * s + 2.0 * c * b;
        p = s * r;
        d[i + 1] = g + p;
        g = c * r - b;
        double* ci = zt.data() + static_cast<size_t>(i) * n;
        double* ci1 = ci + n;
        for (int k = 0; k < n; ++k) {
          const double zi = ci[k], zi1 = ci1[k];
          ci1[k] = s * zi + c * zi1;
          ci[k] = c * zi - s * zi1;
        }
      }
      if (deflated) continue;
      d[l] -= p;
      e[l] = g;
      e[m] = 0;
    }
  }
  return true;
}

struct SvdScratch {
  std::vector<double> gram, lambda, vec;
  std::vector<double> xd;   // by rows: X [n, d] in double
  std::vector<double> acc;  // one row of partial sums
  EigenScratch eigen;
};

// SymmetricEigen on `a` (destroyed) with the caller's scratch.
void SymmetricEigenWith(std::vector<double>& a, int n, EigenScratch& ws,
                        std::vector<double>* values, std::vector<double>* vectors) {
  if (n <= kJacobiMaxOrder) {
    JacobiWith(a, n, ws, values, vectors);
    return;
  }
  ws.original.assign(a.begin(), a.end());
  Tridiagonalize(a, n, ws);
  if (!TridiagonalQl(ws.d, ws.e, n, ws.zt)) {
    JacobiWith(ws.original, n, ws, values, vectors);
    return;
  }
  SortEigenpairs(ws.d, ws.zt, n, ws.order, values, vectors);
}

// Σ_c a[c] b[c] over c < d, in 8 interleaved partial sums that the compiler vectorises.
double Dot(const double* a, const double* b, int d) {
  constexpr int kLanes = 8;
  double part[kLanes] = {};
  int c = 0;
  for (; c + kLanes <= d; c += kLanes) {
    for (int u = 0; u < kLanes; ++u) part[u] += a[c + u] * b[c + u];
  }
  for (; c < d; ++c) part[0] += a[c] * b[c];
  double s = 0;
  for (double p : part) s += p;
  return s;
}

// SmallerGram into g [m, m], with loops whose innermost runs over contiguous memory and
// independent sums, which the compiler vectorises.
void SmallerGramInto(const float* x, int n, int d, int stride, SvdScratch& ws,
                     std::vector<double>& g) {
  const bool by_rows = n <= d;
  const int m = by_rows ? n : d;
  g.assign(static_cast<size_t>(m) * m, 0.0);
  if (by_rows) {  // g[i][j] = x_i · x_j, over rows widened to double once
    ws.xd.resize(static_cast<size_t>(n) * d);
    for (int i = 0; i < n; ++i) {
      const float* row = x + static_cast<size_t>(i) * stride;
      std::copy(row, row + d, ws.xd.begin() + static_cast<size_t>(i) * d);
    }
    for (int i = 0; i < m; ++i) {
      const double* xi = ws.xd.data() + static_cast<size_t>(i) * d;
      for (int j = i; j < m; ++j) {
        g[static_cast<size_t>(i) * m + j] = Dot(xi, ws.xd.data() + static_cast<size_t>(j) * d, d);
      }
    }
  } else {  // g[i][j] = Σ_r x[r][i] x[r][j]
    for (int r = 0; r < n; ++r) {
      const float* row = x + static_cast<size_t>(r) * stride;
      for (int i = 0; i < m; ++i) {
        double* gi = g.data() + static_cast<size_t>(i) * m;
        const double xi = row[i];
        for (int j = i; j < m; ++j) gi[j] += xi * static_cast<double>(row[j]);
      }
    }
  }
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < i; ++j)
      g[static_cast<size_t>(i) * m + j] = g[static_cast<size_t>(j) * m + i];
  }
}

}  // namespace

void SymmetricEigen(std::vector<double> a, int n, std::vector<double>* values,
                    std::vector<double>* vectors) {
  EigenScratch ws;
  SymmetricEigenWith(a, n, ws, values, vectors);
}

std::vector<double> SmallerGram(const float* x, int n, int d, int stride) {
  SvdScratch ws;
  std::vector<double> g;
  SmallerGramInto(x, n, d, stride, ws, g);
  return g;
}

LowRankBasis TruncatedSvd(const float* x, int n, int d, int stride, double energy, int r_max,
                          BasisArena* arena) {
  thread_local SvdScratch ws;
  LowRankBasis b;
  b.rows = n;
  b.cols = d;
  const bool by_rows = n <= d;  // Gram side: X Xᵀ [n, n] or Xᵀ X [d, d]
  const int m = by_rows ? n : d;
  SmallerGramInto(x, n, d, stride, ws, ws.gram);
  std::vector<double>& lambda = ws.lambda;
  std::vector<double>& vec = ws.vec;
  SymmetricEigenWith(ws.gram, m, ws.eigen, &lambda, &vec);
  double total = 0;
  for (double l : lambda) total += std::max(l, 0.0);
  int r = 0;
  double kept = 0;
  const int cap = RankCap(n, d, r_max);
  if (total <= 0) {
    b.energy_kept = 1;
  } else {
    while (r < cap && kept < energy * total) kept += std::max(lambda[r++], 0.0);
    // Drop numerically null directions (σ ≈ 0) even when asked for all the energy.
    while (r > 1 && lambda[r - 1] <= 1e-12 * lambda[0]) kept -= std::max(lambda[--r], 0.0);
    b.energy_kept = kept / total;
  }
  b.rank = r;
  const size_t total_floats = b.us_size() + b.vt_size();
  float* us;
  if (arena != nullptr) {
    us = arena->Allocate(total_floats);
  } else {
    std::shared_ptr<float[]> own(new float[total_floats]);
    us = own.get();
    b.owned = std::move(own);
  }
  float* vt_all = us + b.us_size();
  std::fill(us, us + total_floats, 0.0f);
  b.us = us;
  b.vt = vt_all;
  // Each sum runs over i (or c) ascending, with the innermost loop over independent sums.
  std::vector<double>& acc = ws.acc;
  if (by_rows) {
    // u_j = eigenvector (column j); σ_j v_j = Xᵀ u_j, so (UΣ)[:, j] = σ u_j, Vᵀ[j] = Xᵀu_j/σ.
    for (int j = 0; j < r; ++j) {
      const double sigma = std::sqrt(std::max(lambda[j], 0.0));
      if (sigma <= 0) continue;
      for (int i = 0; i < n; ++i)
        us[static_cast<size_t>(i) * r + j] =
            static_cast<float>(sigma * vec[static_cast<size_t>(i) * m + j]);
      acc.assign(d, 0.0);
      for (int i = 0; i < n; ++i) {
        const float* row = x + static_cast<size_t>(i) * stride;
        const double w = vec[static_cast<size_t>(i) * m + j];
        for (int c = 0; c < d; ++c) acc[c] += static_cast<double>(row[c]) * w;
      }
      float* vt = vt_all + static_cast<size_t>(j) * d;
      for (int c = 0; c < d; ++c) vt[c] = static_cast<float>(acc[c] / sigma);
    }
  } else {
    // v_j = eigenvector; (UΣ)[:, j] = X v_j.
    for (int j = 0; j < r; ++j) {
      if (!(lambda[j] > 0)) continue;  // σ = 0: the direction stays zero
      for (int c = 0; c < d; ++c)
        vt_all[static_cast<size_t>(j) * d + c] =
            static_cast<float>(vec[static_cast<size_t>(c) * m + j]);
    }
    for (int i = 0; i < n; ++i) {
      const float* row = x + static_cast<size_t>(i) * stride;
      acc.assign(r, 0.0);
      for (int c = 0; c < d; ++c) {
        const double xc = row[c];
        const double* vc = vec.data() + static_cast<size_t>(c) * m;
        for (int j = 0; j < r; ++j) acc[j] += xc * vc[j];
      }
      for (int j = 0; j < r; ++j)
        if (lambda[j] > 0) us[static_cast<size_t>(i) * r + j] = static_cast<float>(acc[j]);
    }
  }
  return b;
}

}  // namespace scd::sekv
