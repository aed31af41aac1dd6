// Tests for kernels/cpu: each op against a naive double-precision reference written from the
// definition, including the attention edge cases (GQA, offset starts, sliding windows,
// multiple query blocks).
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/small_batch_linear.h"

namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Naive attention in double, from the definition.
std::vector<double> NaiveAttention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int tokens, int start, int heads,
                                   int kv_heads, int hd, int window) {
  std::vector<double> out(static_cast<size_t>(tokens) * heads * hd, 0.0);
  const int group = heads / kv_heads;
  for (int t = 0; t < tokens; ++t) {
    const int pos = start + t;
    for (int h = 0; h < heads; ++h) {
      const int g = h / group;
      const int lo = window > 0 ? std::max(0, pos - window + 1) : 0;
      std::vector<double> s;
      double mx = -1e300;
      for (int j = lo; j <= pos; ++j) {
        double dot = 0;
        for (int i = 0; i < hd; ++i) {
          dot += double(q[(t * heads + h) * hd + i]) * k[(j * kv_heads + g) * hd + i];
        }
        s.push_back(dot / std::sqrt(double(hd)));
        mx = std::max(mx, s.back());
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (int j = lo; j <= pos; ++j) {
        for (int i = 0; i < hd; ++i) {
          out[(t * heads + h) * hd + i] += s[j - lo] / z * v[(j * kv_heads + g) * hd + i];
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("Linear matches the definition, with and without bias", "[cpu]") {
  for (int m : {1, 3, 17}) {
    const int n = 13, k = 29;
    auto x = Random(m * k, 1), w = Random(n * k, 2), b = Random(n, 3);
    std::vector<float> y(m * n);
    scd::cpu::Linear(x.data(), w.data(), b.data(), y.data(), m, n, k);
    std::vector<double> ref(m * n);
    for (int r = 0; r < m; ++r)
      for (int j = 0; j < n; ++j) {
        double acc = b[j];
        for (int i = 0; i < k; ++i) acc += double(x[r * k + i]) * w[j * k + i];
        ref[r * n + j] = acc;
      }
    CHECK(MaxAbsDiff(y, ref) < 1e-4);
  }
}

TEST_CASE("Linear of up to 4 rows of a small matrix gives each row what it gives alone", "[cpu]") {
  // Up to 16 rows go to SmallBatchLinear whatever the matrix (ops.cc): each row's bits are its own.
  const int n = 300, k = 257;
  auto w = Random(n * k, 4), x = Random(4 * k, 5);
  std::vector<float> alone(n);
  for (int m = 2; m <= 4; ++m) {
    std::vector<float> y(m * n);
    scd::cpu::Linear(x.data(), w.data(), nullptr, y.data(), m, n, k);
    for (int r = 0; r < m; ++r) {
      scd::cpu::Linear(x.data() + r * k, w.data(), nullptr, alone.data(), 1, n, k);
      INFO("rows " << m << ", row " << r);
      CHECK(std::equal(alone.begin(), alone.end(), y.begin() + r * n));
    }
  }
}

TEST_CASE("SmallBatchLinear matches the definition; a row's result is the same in any batch",
          "[cpu]") {
  // k = 1029: 128 full 8-float lanes and a tail of 5. 19 rows: blocks of 4 and a last of 3.
  // n = 1001: many tasks of W rows for up to 3 threads, and an odd last W row (the kernel
  // takes several at a time).
  const int n = 1001, k = 1029, most = 19;
  auto w = Random(static_cast<size_t>(n) * k, 6), x = Random(static_cast<size_t>(most) * k, 7);
  std::vector<double> ref(static_cast<size_t>(most) * n);
  for (int r = 0; r < most; ++r)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int i = 0; i < k; ++i) acc += double(x[r * k + i]) * w[static_cast<size_t>(j) * k + i];
      ref[static_cast<size_t>(r) * n + j] = acc;
    }
  std::vector<float> all(static_cast<size_t>(most) * n);
  scd::cpu::SmallBatchLinear(x.data(), w.data(), all.data(), most, n, k, 1);
  CHECK(MaxAbsDiff(all, ref) < 1e-3);
  for (int m : {1, 2, 3, 5, 8, 9, 16}) {
    for (int threads : {1, 2, 3}) {
      // rows [most - m, most): other neighbours, other block positions
      std::vector<float> y(static_cast<size_t>(m) * n);
      const int first = most - m;
      scd::cpu::SmallBatchLinear(x.data() + static_cast<size_t>(first) * k, w.data(), y.data(), m,
                                 n, k, threads);
      INFO("rows " << m << ", threads " << threads);
      CHECK(std::equal(y.begin(), y.end(), all.begin() + static_cast<size_t>(first) * n));
    }
  }
  // Through Linear: a large matrix's few rows take SmallBatchLinear, with the bias added.
  const int big_n = 300, big_k = 1024;  // 307,200 weights
  auto bw = Random(static_cast<size_t>(big_n) * big_k, 8), bx = Random(6 * big_k, 9),
       bb = Random(big_n, 10);
  std::vector<float> got(6 * big_n), want(6 * big_n);
  scd::cpu::Linear(bx.data(), bw.data(), bb.data(), got.data(), 6, big_n, big_k);
  scd::cpu::SmallBatchLinear(bx.data(), bw.data(), want.data(), 6, big_n, big_k);
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < big_n; ++j) want[r * big_n + j] += bb[j];
  CHECK(got == want);
}

TEST_CASE("RmsNorm matches the definition and may run in place", "[cpu]") {
  const int rows = 5, dim = 37;
  auto x = Random(rows * dim, 4, 3.0f), g = Random(dim, 5);
  std::vector<double> ref(rows * dim);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int i = 0; i < dim; ++i) ref[r * dim + i] = x[r * dim + i] * inv * g[i];
  }
  std::vector<float> y(x.size());
  scd::cpu::RmsNorm(x.data(), g.data(), y.data(), rows, dim, 1e-5f);
  CHECK(MaxAbsDiff(y, ref) < 1e-5);
  scd::cpu::RmsNorm(x.data(), g.data(), x.data(), rows, dim, 1e-5f);
  CHECK(MaxAbsDiff(x, ref) < 1e-5);
}

TEST_CASE("ApplyRope rotates each half-pair by position times frequency", "[cpu]") {
  const int tokens = 4, heads = 3, hd = 8;
  auto x = Random(tokens * heads * hd, 6);
  std::vector<int32_t> pos = {0, 5, 100, 511};
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / hd);
  std::vector<double> ref(x.size());
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double ang = double(float(pos[t]) * inv[i]);
        const float* row = &x[(t * heads + h) * hd];
        ref[(t * heads + h) * hd + i] = row[i] * std::cos(ang) - row[i + hd / 2] * std::sin(ang);
        ref[(t * heads + h) * hd + i + hd / 2] =
            row[i + hd / 2] * std::cos(ang) + row[i] * std::sin(ang);
      }
  scd::cpu::ApplyRope(x.data(), tokens, heads, hd, pos.data(), inv.data());
  CHECK(MaxAbsDiff(x, ref) < 1e-5);
}

TEST_CASE("Softmax rows sum to one and match exp over a wide range", "[cpu]") {
  const int rows = 3, cols = 300;
  auto x = Random(rows * cols, 7, 20.0f);  // spans exp's whole useful range
  std::vector<double> ref(x.size());
  for (int r = 0; r < rows; ++r) {
    double mx = -1e300, z = 0;
    for (int j = 0; j < cols; ++j) mx = std::max(mx, double(x[r * cols + j]));
    for (int j = 0; j < cols; ++j) z += std::exp(x[r * cols + j] - mx);
    for (int j = 0; j < cols; ++j) ref[r * cols + j] = std::exp(x[r * cols + j] - mx) / z;
  }
  scd::cpu::SoftmaxRows(x.data(), rows, cols);
  CHECK(MaxAbsDiff(x, ref) < 1e-6);
  for (int r = 0; r < rows; ++r) {
    double s = 0;
    for (int j = 0; j < cols; ++j) s += x[r * cols + j];
    CHECK(s == Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("CausalAttention matches naive attention", "[cpu]") {
  struct Case {
    int tokens, start, heads, kv_heads, hd, window;
  };
  // Multiple query blocks (> 128 queries), decode-style single queries at an offset, GQA
  // groups of 1, 2 and 4, and sliding windows shorter than a block.
  const Case cases[] = {{7, 0, 4, 4, 8, 0},    {300, 0, 8, 4, 8, 0},  {1, 40, 8, 2, 16, 0},
                        {5, 20, 4, 1, 8, 0},   {200, 10, 4, 2, 8, 9}, {1, 99, 4, 2, 8, 16},
                        {130, 0, 2, 1, 4, 130}};
  for (const Case& c : cases) {
    const int total = c.start + c.tokens;
    auto q = Random(c.tokens * c.heads * c.hd, 8);
    auto k = Random(total * c.kv_heads * c.hd, 9);
    auto v = Random(total * c.kv_heads * c.hd, 10);
    std::vector<float> out(q.size());
    std::vector<float> scratch(scd::cpu::AttentionScratchFloats(c.tokens, c.start, c.heads));
    scd::cpu::CausalAttention(q.data(), k.data(), v.data(), out.data(), c.tokens, c.start, c.heads,
                              c.kv_heads, c.hd, c.window, scratch.data());
    auto ref = NaiveAttention(q, k, v, c.tokens, c.start, c.heads, c.kv_heads, c.hd, c.window);
    INFO("tokens=" << c.tokens << " start=" << c.start << " window=" << c.window);
    CHECK(MaxAbsDiff(out, ref) < 1e-5);
  }
}

TEST_CASE("SwiGlu, Embed and NegLogLikelihood match their definitions", "[cpu]") {
  auto g = Random(50, 11, 4.0f), u = Random(50, 12);
  std::vector<float> out(50);
  scd::cpu::SwiGlu(g.data(), u.data(), out.data(), 50);
  for (int i = 0; i < 50; ++i) {
    CHECK(out[i] == Approx(g[i] / (1 + std::exp(-double(g[i]))) * u[i]).margin(1e-6));
  }
  auto table = Random(10 * 4, 13);
  std::vector<int32_t> ids = {3, 0, 9};
  std::vector<float> e(12);
  scd::cpu::Embed(table.data(), ids.data(), e.data(), 3, 4);
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 4; ++i) CHECK(e[t * 4 + i] == table[ids[t] * 4 + i]);
  auto logits = Random(2 * 6, 14, 5.0f);
  std::vector<int32_t> targets = {2, 5};
  std::vector<float> nll(2);
  scd::cpu::NegLogLikelihood(logits.data(), targets.data(), nll.data(), 2, 6);
  for (int r = 0; r < 2; ++r) {
    double z = 0;
    for (int j = 0; j < 6; ++j) z += std::exp(double(logits[r * 6 + j]));
    CHECK(nll[r] == Approx(std::log(z) - logits[r * 6 + targets[r]]).margin(1e-5));
  }
}
