// Tests for kernels/cpu/small_batch_linear_kernel.h at 16 lanes, the AVX-512 variant's width,
// on any CPU. The kernel's loops run over a vector type of 16 plain floats whose multiply-adds
// round once per lane (std::fma, the arithmetic of _mm512_fmadd_ps), and must give, bit for
// bit, plain loops that sum in the order the header states. That leaves the AVX-512 variant
// only its five one-line intrinsics (small_batch_linear_avx512.cc) beyond what runs here;
// where the CPU has AVX-512, the variant itself must give the same bits.
#include "kernels/cpu/small_batch_linear_kernel.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/small_batch_linear.h"

namespace scd::cpu {
namespace {

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

std::vector<float> Normal16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
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
    const auto w = Normal16(static_cast<size_t>(c.n) * c.k, 21);
    const auto x = Normal16(static_cast<size_t>(16) * c.k, 22);
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
    const auto w = Normal16(static_cast<size_t>(c.n) * c.k, 23);
    const auto x = Normal16(static_cast<size_t>(16) * c.k, 24);
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
  const CpuIsa saved = ActiveIsa();
  for (CpuIsa isa : RunnableIsas()) {
    if (isa != CpuIsa::kAvx512) continue;  // the 8-lane variants: small_batch_linear_test.cc
    SetActiveIsa(isa);
    CheckAvx512Variant();
  }
  SetActiveIsa(saved);
}

}  // namespace
}  // namespace scd::cpu
