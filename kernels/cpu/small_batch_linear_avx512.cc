// SmallBatchLinear's AVX-512 variant (small_batch_linear.h): the loops of
// small_batch_linear_kernel.h, the AVX2 variant's own source, compiled for AVX-512F/BW/VL with
// 16-float vectors. The whole build targets AVX2, so only the code between the target pragmas
// below uses AVX-512, and it runs only when ActiveIsa() is kAvx512, which DetectedIsa() allows
// only on a CPU that has those extensions. The kernel header has internal linkage throughout,
// so no AVX-512 copy of an inline function can stand in for the AVX2 one at link time.
//
// Compilers without GCC's target pragma (and non-x86 builds) compile nothing here, and
// small_batch_linear.cc gives kAvx512 the AVX2 variant.
#include <cmath>
#include <cstddef>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SCD_SMALL_BATCH_AVX512 1
#include <immintrin.h>
#endif

#if SCD_SMALL_BATCH_AVX512

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")

namespace scd::cpu {
namespace {

struct Avx512Vec {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  // 32 registers: M·R accumulators, R W vectors and an input vector with room to spare.
  static constexpr int kWRows[4] = {4, 4, 4, 4};
  static Reg Zero() { return _mm512_setzero_ps(); }
  static Reg Load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static void Store(float* p, Reg v) { _mm512_store_ps(p, v); }
};

}  // namespace
}  // namespace scd::cpu

#include "kernels/cpu/small_batch_linear_kernel.h"

namespace scd::cpu {
namespace {

__attribute__((noinline)) void RangeAvx512(const float* x, const float* w, float* y, int m, int n,
                                           int k, int j0, int j1) {
  DotRange<Avx512Vec>(x, w, y, m, n, k, j0, j1);
}

}  // namespace
}  // namespace scd::cpu

#pragma GCC pop_options

namespace scd::cpu {

void SmallBatchRangeAvx512(const float* x, const float* w, float* y, int m, int n, int k, int j0,
                           int j1) {
  RangeAvx512(x, w, y, m, n, k, j0, j1);
}

}  // namespace scd::cpu

#endif  // SCD_SMALL_BATCH_AVX512
