// See low_rank.h.
#include "common/sekv/low_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace scd::sekv {

void LowRankBasis::Reconstruct(float* out, int out_stride) const {
  for (int i = 0; i < rows; ++i) {
    float* o = out + static_cast<size_t>(i) * out_stride;
    std::fill(o, o + cols, 0.0f);
    for (int j = 0; j < rank; ++j) {
      const float a = us[static_cast<size_t>(i) * rank + j];
      const float* v = vt.data() + static_cast<size_t>(j) * cols;
      for (int c = 0; c < cols; ++c) o[c] += a * v[c];
    }
  }
}

void LowRankBasis::ReconstructRow(int i, float* out) const {
  std::fill(out, out + cols, 0.0f);
  for (int j = 0; j < rank; ++j) {
    const float a = us[static_cast<size_t>(i) * rank + j];
    const float* v = vt.data() + static_cast<size_t>(j) * cols;
    for (int c = 0; c < cols; ++c) out[c] += a * v[c];
  }
}

void SymmetricEigenJacobi(std::vector<double> a, int n, std::vector<double>* values,
                          std::vector<double>* vectors) {
  std::vector<double> v(static_cast<size_t>(n) * n, 0.0);
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
        for (int k = 0; k < n; ++k) {
          double* row = v.data() + static_cast<size_t>(k) * n;
          const double vkp = row[p], vkq = row[q];
          row[p] = c * vkp - s * vkq;
          row[q] = s * vkp + c * vkq;
        }
      }
    }
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return at(x, x) > at(y, y); });
  values->resize(n);
  vectors->assign(static_cast<size_t>(n) * n, 0.0);
  for (int j = 0; j < n; ++j) {
    (*values)[j] = at(order[j], order[j]);
    for (int i = 0; i < n; ++i) {
      (*vectors)[static_cast<size_t>(i) * n + j] = v[static_cast<size_t>(i) * n + order[j]];
    }
  }
}

namespace {

// Householder reduction of the symmetric a [n, n] (row-major; destroyed) to a tridiagonal T =
// Qᵀ a Q: diagonal d [n], off-diagonal e [n] (e[i] couples i and i + 1; e[n - 1] = 0), and Q
// [n, n] row-major. Step k reflects rows and columns k + 1.. so that column k below its first
// sub-diagonal entry becomes zero: with v = x - α e₁ (x that part of column k, α = -sign(x₀)
// |x|) and β = 2 / vᵀv, the trailing block B becomes H B H = B - v wᵀ - w vᵀ, where
// p = β B v and w = p - (β vᵀp / 2) v; Q accumulates Q H.
void Tridiagonalize(std::vector<double>& a, int n, std::vector<double>* d, std::vector<double>* e,
                    std::vector<double>* q) {
  auto at = [&](int i, int j) -> double& { return a[static_cast<size_t>(i) * n + j]; };
  q->assign(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) (*q)[static_cast<size_t>(i) * n + i] = 1.0;
  std::vector<double> v(n), p(n);
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
    double vp = 0;
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int j = 0; j < m; ++j) s += at(k + 1 + i, k + 1 + j) * v[j];
      p[i] = beta * s;
      vp += v[i] * p[i];
    }
    const double half = 0.5 * beta * vp;
    for (int i = 0; i < m; ++i) p[i] -= half * v[i];  // p is now w
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) at(k + 1 + i, k + 1 + j) -= v[i] * p[j] + p[i] * v[j];
    }
    at(k + 1, k) = at(k, k + 1) = alpha;
    for (int i = 1; i < m; ++i) at(k + 1 + i, k) = at(k, k + 1 + i) = 0;
    for (int r = 0; r < n; ++r) {
      double* row = q->data() + static_cast<size_t>(r) * n + k + 1;
      double s = 0;
      for (int j = 0; j < m; ++j) s += row[j] * v[j];
      s *= beta;
      for (int j = 0; j < m; ++j) row[j] -= s * v[j];
    }
  }
  d->resize(n);
  e->assign(n, 0.0);
  for (int i = 0; i < n; ++i) (*d)[i] = at(i, i);
  for (int i = 0; i + 1 < n; ++i) (*e)[i] = at(i + 1, i);
}

// Eigenvalues of the tridiagonal (d, e) into d, by QL iterations with implicit Wilkinson-type
// shifts, each a chase of Givens rotations from the bottom of the unreduced block up; the
// rotations are applied to the columns of z [n, n] (row-major), which therefore turns from Q
// into Q times T's eigenvectors. False when a block does not converge in 60 iterations.
bool TridiagonalQl(std::vector<double>& d, std::vector<double>& e, int n, std::vector<double>& z) {
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
      double r = std::hypot(g, 1.0);
      g = d[m] - d[l] + e[l] / (g + (g >= 0 ? r : -r));
      double s = 1, c = 1, p = 0;
      int i = m - 1;
      bool deflated = false;
      for (; i >= l; --i) {
        const double f = s * e[i], b = c * e[i];
        r = std::hypot(f, g);
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
        for (int k = 0; k < n; ++k) {
          double* row = z.data() + static_cast<size_t>(k) * n;
          const double zi = row[i], zi1 = row[i + 1];
          row[i + 1] = s * zi + c * zi1;
          row[i] = c * zi - s * zi1;
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

}  // namespace

void SymmetricEigen(std::vector<double> a, int n, std::vector<double>* values,
                    std::vector<double>* vectors) {
  if (n <= kJacobiMaxOrder) {
    SymmetricEigenJacobi(std::move(a), n, values, vectors);
    return;
  }
  const std::vector<double> original = a;
  std::vector<double> d, e, z;
  Tridiagonalize(a, n, &d, &e, &z);
  if (!TridiagonalQl(d, e, n, z)) {
    SymmetricEigenJacobi(original, n, values, vectors);
    return;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return d[x] > d[y]; });
  values->resize(n);
  vectors->assign(static_cast<size_t>(n) * n, 0.0);
  for (int j = 0; j < n; ++j) {
    (*values)[j] = d[order[j]];
    for (int i = 0; i < n; ++i) {
      (*vectors)[static_cast<size_t>(i) * n + j] = z[static_cast<size_t>(i) * n + order[j]];
    }
  }
}

std::vector<double> SmallerGram(const float* x, int n, int d, int stride) {
  const bool by_rows = n <= d;
  const int m = by_rows ? n : d;
  std::vector<double> g(static_cast<size_t>(m) * m, 0.0);
  auto xe = [&](int i, int c) {
    return static_cast<double>(x[static_cast<size_t>(i) * stride + c]);
  };
  for (int i = 0; i < m; ++i) {
    for (int j = i; j < m; ++j) {
      double s = 0;
      if (by_rows) {
        for (int c = 0; c < d; ++c) s += xe(i, c) * xe(j, c);
      } else {
        for (int r = 0; r < n; ++r) s += xe(r, i) * xe(r, j);
      }
      g[static_cast<size_t>(i) * m + j] = g[static_cast<size_t>(j) * m + i] = s;
    }
  }
  return g;
}

LowRankBasis TruncatedSvd(const float* x, int n, int d, int stride, double energy, int r_max) {
  LowRankBasis b;
  b.rows = n;
  b.cols = d;
  const bool by_rows = n <= d;  // Gram side: X Xᵀ [n, n] or Xᵀ X [d, d]
  const int m = by_rows ? n : d;
  auto xe = [&](int i, int c) {
    return static_cast<double>(x[static_cast<size_t>(i) * stride + c]);
  };
  std::vector<double> lambda, vec;
  SymmetricEigen(SmallerGram(x, n, d, stride), m, &lambda, &vec);
  double total = 0;
  for (double l : lambda) total += std::max(l, 0.0);
  int r = 0;
  double kept = 0;
  const int cap = std::max(1, std::min({r_max, m}));
  if (total <= 0) {
    b.energy_kept = 1;
  } else {
    while (r < cap && kept < energy * total) kept += std::max(lambda[r++], 0.0);
    // Drop numerically null directions (σ ≈ 0) even when asked for all the energy.
    while (r > 1 && lambda[r - 1] <= 1e-12 * lambda[0]) kept -= std::max(lambda[--r], 0.0);
    b.energy_kept = kept / total;
  }
  b.rank = r;
  b.us.assign(static_cast<size_t>(n) * r, 0.0f);
  b.vt.assign(static_cast<size_t>(r) * d, 0.0f);
  for (int j = 0; j < r; ++j) {
    const double sigma = std::sqrt(std::max(lambda[j], 0.0));
    if (sigma <= 0) continue;
    if (by_rows) {
      // u_j = eigenvector (column j); σ_j v_j = Xᵀ u_j, so (UΣ)[:, j] = σ u_j, Vᵀ[j] = Xᵀu_j/σ.
      for (int i = 0; i < n; ++i)
        b.us[static_cast<size_t>(i) * r + j] =
            static_cast<float>(sigma * vec[static_cast<size_t>(i) * m + j]);
      for (int c = 0; c < d; ++c) {
        double s = 0;
        for (int i = 0; i < n; ++i) s += xe(i, c) * vec[static_cast<size_t>(i) * m + j];
        b.vt[static_cast<size_t>(j) * d + c] = static_cast<float>(s / sigma);
      }
    } else {
      // v_j = eigenvector; (UΣ)[:, j] = X v_j.
      for (int c = 0; c < d; ++c)
        b.vt[static_cast<size_t>(j) * d + c] =
            static_cast<float>(vec[static_cast<size_t>(c) * m + j]);
      for (int i = 0; i < n; ++i) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += xe(i, c) * vec[static_cast<size_t>(c) * m + j];
        b.us[static_cast<size_t>(i) * r + j] = static_cast<float>(s);
      }
    }
  }
  return b;
}

}  // namespace scd::sekv
