// Tests for kernels/cpu/small_batch_linear: every variant this CPU runs (RunnableIsas) against
// double-precision references over odd sizes (k off the vector width, one W row, huge rows,
// 1 to 16 input rows), and the invariants the header promises: a row's bits do not depend on
// its batch, its place in it or the thread cap; the scalar twin and the AVX2 variant agree bit
// for bit; cpu::Linear sends every decode-sized batch here. And small_batch_linear_kernel.h's
// loops at 16 lanes, the AVX-512 variant's width, on any CPU: over a vector type of 16 plain
// floats whose multiply-adds round once per lane (std::fma, the arithmetic of
// _mm512_fmadd_ps), they must give the header's order of sums bit for bit, which leaves the
// AVX-512 variant only its one-line intrinsics beyond what runs here; where the CPU has
// AVX-512, the variant itself must give the same bits.
#include "kernels/cpu/small_batch_linear.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/small_batch_linear_kernel.h"

namespace scd::cpu {
namespace {

// Restores the process's ISA choice when a test that lowers it ends, even by an exception.
struct IsaRestorer {
  CpuIsa saved = ActiveIsa();
  ~IsaRestorer() { SetActiveIsa(saved); }
};

std::vector<float> Normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Small integers: every partial sum of up to 2^16 products of at most 16 is an integer below
// 2^24, exact in float whatever the order, so any variant must give the reference exactly and
// a single misplaced element shows, however long the row.
std::vector<float> SmallIntegers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-4, 4);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

// y = x·wᵀ in double, and the sum of |products| of each output (the scale of its rounding).
void Reference(const std::vector<float>& x, const std::vector<float>& w, int m, int n, int k,
               std::vector<double>* y, std::vector<double>* scale) {
  y->assign(static_cast<size_t>(m) * n, 0.0);
  scale->assign(y->size(), 0.0);
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      double s = 0, a = 0;
      for (int i = 0; i < k; ++i) {
        const double p =
            double(x[static_cast<size_t>(r) * k + i]) * w[static_cast<size_t>(j) * k + i];
        s += p;
        a += std::abs(p);
      }
      (*y)[static_cast<size_t>(r) * n + j] = s;
      (*scale)[static_cast<size_t>(r) * n + j] = a;
    }
  }
}

struct Shape {
  int n, k;
};

// k: 1, below one vector, one past it, a 16-float vector and one, d_model - 1, a huge row.
// n: a single W row, fewer W rows than a register block, odd counts past one.
constexpr Shape kShapes[] = {{1, 1},  {3, 7},   {5, 9},       {1, 33},     {33, 33},
                             {7, 17}, {9, 767}, {2, 1 << 16}, {1, 1 << 16}};

TEST_CASE("SmallBatchLinear is exact on integer data in every variant and shape", "[cpu]") {
  IsaRestorer restore;
  for (CpuIsa isa : RunnableIsas()) {
    SetActiveIsa(isa);
    for (const Shape& s : kShapes) {
      const auto w = SmallIntegers(static_cast<size_t>(s.n) * s.k, 1);
      const auto x = SmallIntegers(static_cast<size_t>(kSmallBatchMaxRows) * s.k, 2);
      for (int m = 1; m <= kSmallBatchMaxRows; ++m) {
        std::vector<double> want, scale;
        Reference(x, w, m, s.n, s.k, &want, &scale);
        std::vector<float> y(static_cast<size_t>(m) * s.n);
        SmallBatchLinear(x.data(), w.data(), y.data(), m, s.n, s.k);
        INFO(IsaName(isa) << ": m " << m << ", n " << s.n << ", k " << s.k);
        REQUIRE(std::equal(y.begin(), y.end(), want.begin()));
      }
    }
  }
}

TEST_CASE("SmallBatchLinear matches a double reference on Gaussian data in every variant",
          "[cpu]") {
  IsaRestorer restore;
  for (CpuIsa isa : RunnableIsas()) {
    SetActiveIsa(isa);
    for (const Shape& s : kShapes) {
      const auto w = Normal(static_cast<size_t>(s.n) * s.k, 3);
      const auto x = Normal(static_cast<size_t>(kSmallBatchMaxRows) * s.k, 4);
      std::vector<double> want, scale;
      Reference(x, w, kSmallBatchMaxRows, s.n, s.k, &want, &scale);
      for (int m = 1; m <= kSmallBatchMaxRows; ++m) {
        std::vector<float> y(static_cast<size_t>(m) * s.n);
        SmallBatchLinear(x.data(), w.data(), y.data(), m, s.n, s.k);
        double worst = 0;  // error relative to the sum of |products|
        for (size_t i = 0; i < y.size(); ++i) {
          worst = std::max(worst, std::abs(y[i] - want[i]) / scale[i]);
        }
        INFO(IsaName(isa) << ": m " << m << ", n " << s.n << ", k " << s.k);
        CHECK(worst < 1e-5);
      }
    }
  }
}

TEST_CASE("SmallBatchLinear gives a row the same bits alone, in any batch, on any threads",
          "[cpu]") {
  IsaRestorer restore;
  // n = 1001 W rows of k = 1029 (128 vectors of 8 and a tail of 5): about 4 MB, many tasks,
  // an odd last W row. 16 input rows: four blocks of four, and smaller last blocks below.
  const int n = 1001, k = 1029, most = kSmallBatchMaxRows;
  const auto w = Normal(static_cast<size_t>(n) * k, 5),
             x = Normal(static_cast<size_t>(most) * k, 6);
  for (CpuIsa isa : RunnableIsas()) {
    SetActiveIsa(isa);
    std::vector<float> all(static_cast<size_t>(most) * n);
    SmallBatchLinear(x.data(), w.data(), all.data(), most, n, k, 1);
    for (int m = 1; m <= most; ++m) {
      for (int first : {0, most - m}) {  // other neighbours, other places in a block
        for (int threads : {1, 2, 4}) {
          std::vector<float> y(static_cast<size_t>(m) * n);
          SmallBatchLinear(x.data() + static_cast<size_t>(first) * k, w.data(), y.data(), m, n, k,
                           threads);
          INFO(IsaName(isa) << ": rows [" << first << ", " << first + m << "), threads "
                            << threads);
          REQUIRE(std::equal(y.begin(), y.end(), all.begin() + static_cast<size_t>(first) * n));
        }
      }
    }
  }
}

TEST_CASE("SmallBatchLinear's scalar twin and vector variants agree", "[cpu]") {
  IsaRestorer restore;
  const int n = 67, k = 1 << 12 | 13;  // a tail of 13 for 8 lanes and for 16
  const auto w = Normal(static_cast<size_t>(n) * k, 7), x = Normal(static_cast<size_t>(16) * k, 8);
  std::vector<double> want, scale;
  Reference(x, w, 16, n, k, &want, &scale);
  SetActiveIsa(CpuIsa::kScalar);
  std::vector<float> scalar(static_cast<size_t>(16) * n);
  SmallBatchLinear(x.data(), w.data(), scalar.data(), 16, n, k);
  for (CpuIsa isa : RunnableIsas()) {
    SetActiveIsa(isa);
    std::vector<float> y(scalar.size());
    SmallBatchLinear(x.data(), w.data(), y.data(), 16, n, k);
    INFO(IsaName(isa));
    if (isa == CpuIsa::kAvx2) CHECK(y == scalar);  // the same order of sums, bit for bit
    for (size_t i = 0; i < y.size(); ++i) {        // AVX-512 groups 16 lanes: rounding apart
      REQUIRE(std::abs(y[i] - scalar[i]) <= 1e-5 * scale[i]);
    }
  }
}

TEST_CASE("Linear sends 1 to 16 rows of any matrix to SmallBatchLinear, bias added", "[cpu]") {
  for (const Shape& s : {Shape{13, 29}, Shape{300, 1024}}) {
    const auto w = Normal(static_cast<size_t>(s.n) * s.k, 9),
               x = Normal(static_cast<size_t>(kSmallBatchMaxRows) * s.k, 10),
               b = Normal(static_cast<size_t>(s.n), 11);
    for (int m : {1, 2, 5, 16}) {
      std::vector<float> got(static_cast<size_t>(m) * s.n), want(got.size());
      Linear(x.data(), w.data(), b.data(), got.data(), m, s.n, s.k);
      SmallBatchLinear(x.data(), w.data(), want.data(), m, s.n, s.k);
      for (int r = 0; r < m; ++r)
        for (int j = 0; j < s.n; ++j) want[static_cast<size_t>(r) * s.n + j] += b[j];
      INFO("m " << m << ", n " << s.n << ", k " << s.k);
      CHECK(got == want);
    }
  }
}

TEST_CASE("Linear with SmallBatchLinear switched off still computes the product", "[cpu]") {
  // The OpenBLAS path benchmarks compare against: sgemv per row up to 4 rows, then sgemm.
  const int n = 45, k = 70;
  const auto w = Normal(static_cast<size_t>(n) * k, 12),
             x = Normal(static_cast<size_t>(16) * k, 13);
  std::vector<double> want, scale;
  Reference(x, w, 16, n, k, &want, &scale);
  SetSmallBatchLinearEnabled(false);
  for (int m : {1, 4, 16}) {
    std::vector<float> y(static_cast<size_t>(m) * n);
    Linear(x.data(), w.data(), nullptr, y.data(), m, n, k);
    for (size_t i = 0; i < y.size(); ++i) CHECK(std::abs(y[i] - want[i]) <= 1e-5 * scale[i]);
  }
  SetSmallBatchLinearEnabled(true);
  CHECK(SmallBatchLinearEnabled());
}

// 16 float lanes, each multiply-add rounded once; kWRows as the variant under test blocks W.
template <int R1, int R2, int R3, int R4>
struct Lanes16 {
  struct Reg {
    float v[16];
  };
  static constexpr int kLanes = 16;
  static constexpr int kWRows[4] = {R1, R2, R3, R4};
  static Reg Zero() { return Reg{}; }
  static Reg Load(const float* p) {
    Reg r;
    std::memcpy(r.v, p, sizeof(r.v));
    return r;
  }
  static Reg Fma(Reg a, Reg b, Reg c) {
    for (int l = 0; l < kLanes; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  static void Store(float* p, Reg r) { std::memcpy(p, r.v, sizeof(r.v)); }
};

// The header's order of sums as plain loops, at 16 lanes: lane l runs over the body's elements
// i ≡ l (mod 16) in increasing i, the lanes are added in order from 0, then the tail.
float Dot16(const float* w, const float* x, int k) {
  const int body = k / 16 * 16;
  float lanes[16] = {};
  for (int i = 0; i < body; i += 16) {
    for (int l = 0; l < 16; ++l) lanes[l] = std::fma(w[i + l], x[i + l], lanes[l]);
  }
  float s = 0.0f;
  for (float lane : lanes) s += lane;
  for (int i = body; i < k; ++i) s = std::fma(w[i], x[i], s);
  return s;
}

struct Lanes16Case {
  int n, k;
};
// k below one vector (no body), exactly one, with tails of 1 and 13, and a long row; n off
// every blocking (4, 12, 3) so that the one-row-at-a-time remainder runs too.
constexpr Lanes16Case kLanes16Cases[] = {{1, 5}, {7, 16}, {13, 33}, {29, 1000}, {5, 4096 + 13}};
constexpr float kUntouched = 12345.0f;

// DotRange<V> over W rows [j0, j1) for 1..16 input rows against Dot16, bit for bit, and the
// outputs outside [j0, j1) left as they were.
template <class V>
void CheckAgainstOrder(const char* blocking) {
  for (const Lanes16Case& c : kLanes16Cases) {
    const auto w = Normal(static_cast<size_t>(c.n) * c.k, 21);
    const auto x = Normal(static_cast<size_t>(16) * c.k, 22);
    const int j0 = c.n > 2 ? 1 : 0, j1 = c.n > 2 ? c.n - 1 : c.n;
    for (int m = 1; m <= 16; ++m) {
      std::vector<float> y(static_cast<size_t>(m) * c.n, kUntouched);
      DotRange<V>(x.data(), w.data(), y.data(), m, c.n, c.k, j0, j1);
      INFO(blocking << ": n " << c.n << ", k " << c.k << ", rows " << m);
      for (int r = 0; r < m; ++r) {
        for (int j = 0; j < c.n; ++j) {
          const float got = y[static_cast<size_t>(r) * c.n + j];
          const bool inside = j >= j0 && j < j1;
          const float want = inside ? Dot16(&w[static_cast<size_t>(j) * c.k],
                                            &x[static_cast<size_t>(r) * c.k], c.k)
                                    : kUntouched;
          INFO("row " << r << ", W row " << j);
          REQUIRE(got == want);
        }
      }
    }
  }
}

// Where the CPU has AVX-512, the variant itself against Dot16, bit for bit.
void CheckAvx512Variant() {
  for (const Lanes16Case& c : kLanes16Cases) {
    const auto w = Normal(static_cast<size_t>(c.n) * c.k, 23);
    const auto x = Normal(static_cast<size_t>(16) * c.k, 24);
    std::vector<float> y(static_cast<size_t>(16) * c.n);
    SmallBatchLinear(x.data(), w.data(), y.data(), 16, c.n, c.k);
    for (int r = 0; r < 16; ++r) {
      for (int j = 0; j < c.n; ++j) {
        INFO("AVX-512: n " << c.n << ", k " << c.k << ", row " << r << ", W row " << j);
        REQUIRE(y[static_cast<size_t>(r) * c.n + j] ==
                Dot16(&w[static_cast<size_t>(j) * c.k], &x[static_cast<size_t>(r) * c.k], c.k));
      }
    }
  }
}

TEST_CASE("The kernel's loops at 16 lanes keep the stated order of sums, bit for bit", "[cpu]") {
  CheckAgainstOrder<Lanes16<4, 4, 4, 4>>("the AVX-512 variant's blocking");
  CheckAgainstOrder<Lanes16<12, 4, 3, 3>>("the AVX2 variant's blocking");
  CheckAgainstOrder<Lanes16<1, 1, 1, 1>>("one W row at a time");
  IsaRestorer restore;
  for (CpuIsa isa : RunnableIsas()) {
    if (isa != CpuIsa::kAvx512) continue;  // the 8-lane variants: the tests above
    SetActiveIsa(isa);
    CheckAvx512Variant();
  }
}

}  // namespace
}  // namespace scd::cpu
