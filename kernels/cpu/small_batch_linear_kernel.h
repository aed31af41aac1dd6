// The register-blocked inner loops of SmallBatchLinear (small_batch_linear.h), written once
// over a vector type V and compiled once per instruction set: small_batch_linear.cc builds them
// for AVX2 (V = 8 floats), small_batch_linear_avx512.cc for AVX-512 (V = 16 floats) under a
// target pragma. Internal to those two files (and small_batch_linear_test.cc, which runs these
// loops at 16 lanes of plain floats on any CPU): everything here has internal linkage, so the two
// compilations never meet at link time (an AVX-512 copy of a shared inline function could
// otherwise be the one the linker keeps, and fault on a CPU without AVX-512).
//
// V provides: Reg, kLanes, Zero(), Load(p), Fma(a, b, c) = a·b + c rounded once, Store(p, v),
// and kWRows[M - 1], the W rows held in registers against a block of M input rows.
//
// Order of sums, the same for every (W row, input row) pair whatever the blocking: kLanes
// partial sums, lane l running with fused multiply-adds over the elements i ≡ l (mod kLanes)
// of the body (the first k / kLanes · kLanes elements) in increasing i; then the lanes added
// in lane order, starting from 0; then the tail elements in increasing i, each with a fused
// multiply-add. The scalar twin (small_batch_linear.cc) writes the same order as plain loops.
//
// A file that includes this must include <cmath> and <cstddef> first (before any target pragma).
#ifndef SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_KERNEL_H_
#define SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_KERNEL_H_

#include <cmath>
#include <cstddef>

namespace scd::cpu {
namespace {

// Input rows that share the W rows held in registers.
constexpr int kInputBlock = 4;

// The lanes added in order, then the tail [body, k) with fused multiply-adds.
template <int kLanes>
inline float FinishDot(const float* lanes, const float* wr, const float* xr, int body, int k) {
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += lanes[l];
  for (int i = body; i < k; ++i) s = std::fma(wr[i], xr[i], s);
  return s;
}

// M input rows at x (stride k) against W rows [j0, j1), into y (stride n), R W rows at a time:
// each vector of the input rows is loaded once for R W rows, and the M·R accumulators keep the
// FMAs independent. The last < R W rows go one at a time, with the same sums.
template <class V, int M, int R>
void DotBlock(const float* x, const float* w, float* y, int n, int k, int j0, int j1) {
  constexpr int kLanes = V::kLanes;
  const int body = k / kLanes * kLanes;
  alignas(64) float lanes[kLanes];
  int j = j0;
  for (; j + R <= j1; j += R) {
    const float* w0 = w + static_cast<size_t>(j) * k;
    typename V::Reg acc[R][M];
#pragma GCC unroll 16
    for (int q = 0; q < R; ++q)
#pragma GCC unroll 16
      for (int r = 0; r < M; ++r) acc[q][r] = V::Zero();
    for (int i = 0; i < body; i += kLanes) {
      typename V::Reg wv[R];
#pragma GCC unroll 16
      for (int q = 0; q < R; ++q) wv[q] = V::Load(w0 + static_cast<size_t>(q) * k + i);
#pragma GCC unroll 16
      for (int r = 0; r < M; ++r) {
        const typename V::Reg xv = V::Load(x + static_cast<size_t>(r) * k + i);
#pragma GCC unroll 16
        for (int q = 0; q < R; ++q) acc[q][r] = V::Fma(wv[q], xv, acc[q][r]);
      }
    }
    for (int q = 0; q < R; ++q) {
      for (int r = 0; r < M; ++r) {
        V::Store(lanes, acc[q][r]);
        y[static_cast<size_t>(r) * n + j + q] = FinishDot<kLanes>(
            lanes, w0 + static_cast<size_t>(q) * k, x + static_cast<size_t>(r) * k, body, k);
      }
    }
  }
  if constexpr (R > 1) {
    if (j < j1) DotBlock<V, M, 1>(x, w, y, n, k, j, j1);
  }
}

// Every block of up to kInputBlock input rows over W rows [j0, j1): those W rows stay in cache
// between blocks, so W comes from memory once whatever the number of input rows.
template <class V>
void DotRange(const float* x, const float* w, float* y, int m, int n, int k, int j0, int j1) {
  for (int r0 = 0; r0 < m; r0 += kInputBlock) {
    const float* xb = x + static_cast<size_t>(r0) * k;
    float* yb = y + static_cast<size_t>(r0) * n;
    switch (m - r0 < kInputBlock ? m - r0 : kInputBlock) {
      case 1:
        DotBlock<V, 1, V::kWRows[0]>(xb, w, yb, n, k, j0, j1);
        break;
      case 2:
        DotBlock<V, 2, V::kWRows[1]>(xb, w, yb, n, k, j0, j1);
        break;
      case 3:
        DotBlock<V, 3, V::kWRows[2]>(xb, w, yb, n, k, j0, j1);
        break;
      default:
        DotBlock<V, 4, V::kWRows[3]>(xb, w, yb, n, k, j0, j1);
        break;
    }
  }
}

}  // namespace
}  // namespace scd::cpu

#endif  // SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_KERNEL_H_
