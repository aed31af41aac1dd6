// Small-batch linear (see ops.h): y = x · wᵀ for decode-sized m, as a weight stream. A decode
// step's projections read every weight once and do 2 m FLOPs per weight, so their speed is the
// rate the weights stream from HBM. One warp owns one weight row: each lane reads 16-byte
// vectors of it (8 BF16) at a 512-byte warp stride, four vectors in flight, and multiplies each
// with the same slice of every x row (L1-resident, x is m * k * 2 bytes); a warp sum ends the
// row. 8 warps (rows) a block.
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kUnroll = 4;  // 16-byte weight vectors in flight per lane

// sum_i a_i * b_i over the 8 BF16 pairs of two 16-byte vectors.
__device__ __forceinline__ float Dot8(const uint4& a, const uint4& b) {
  const unsigned av[4] = {a.x, a.y, a.z, a.w};
  const unsigned bv[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s += __uint_as_float(av[i] << 16) * __uint_as_float(bv[i] << 16);
    s += __uint_as_float(av[i] & 0xffff0000u) * __uint_as_float(bv[i] & 0xffff0000u);
  }
  return s;
}

template <int M>
__global__ void __launch_bounds__(kThreads)
    LinearSmallBatchKernel(const uint4* __restrict__ x, const uint4* __restrict__ w,
                           float* __restrict__ y, int n, int k, float beta) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= n) return;  // the whole warp: nothing below synchronises the block
  const int vecs = k / 8;
  const uint4* wr = w + static_cast<int64_t>(row) * vecs;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;

  int c = lane;
  for (; c + (kUnroll - 1) * 32 < vecs; c += kUnroll * 32) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = wr[c + u * 32];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int m = 0; m < M; ++m) acc[m] += Dot8(wv[u], x[m * vecs + c + u * 32]);
    }
  }
  for (; c < vecs; c += 32) {
    const uint4 wv = wr[c];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] += Dot8(wv, x[m * vecs + c]);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = internal::WarpSum(acc[m]);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float* out = y + static_cast<int64_t>(m) * n + row;
      *out = beta == 0.0f ? acc[m] : acc[m] + beta * *out;
    }
  }
}

template <int M>
absl::Status Launch(const Bf16* x, const Bf16* w, float* y, int n, int k, float beta,
                    StreamHandle stream) {
  const unsigned blocks = static_cast<unsigned>(internal::CeilDiv(n, kWarpsPerBlock));
  LinearSmallBatchKernel<M><<<blocks, kThreads, 0, AsStream(stream)>>>(
      reinterpret_cast<const uint4*>(x), reinterpret_cast<const uint4*>(w), y, n, k, beta);
  return LaunchStatus("LinearSmallBatchKernel");
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool LinearSmallBatchSupports(const Bf16* x, const Bf16* w, int m, int k) {
  return m >= 1 && m <= kSmallBatchMaxRows && k > 0 && k % 8 == 0 && Aligned16(x) && Aligned16(w);
}

absl::Status LinearSmallBatch(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                              float beta, StreamHandle stream) {
  if (n <= 0) return absl::OkStatus();
  if (!LinearSmallBatchSupports(x, w, m, k)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LinearSmallBatch: needs 1 <= m <= ", kSmallBatchMaxRows,
                     ", k a multiple of 8 and 16-byte aligned x and w (m=", m, ", k=", k, ")"));
  }
  static_assert(kSmallBatchMaxRows == 8, "one case per m below");
  switch (m) {
    case 1:
      return Launch<1>(x, w, y, n, k, beta, stream);
    case 2:
      return Launch<2>(x, w, y, n, k, beta, stream);
    case 3:
      return Launch<3>(x, w, y, n, k, beta, stream);
    case 4:
      return Launch<4>(x, w, y, n, k, beta, stream);
    case 5:
      return Launch<5>(x, w, y, n, k, beta, stream);
    case 6:
      return Launch<6>(x, w, y, n, k, beta, stream);
    case 7:
      return Launch<7>(x, w, y, n, k, beta, stream);
    default:
      return Launch<8>(x, w, y, n, k, beta, stream);
  }
}

}  // namespace scd::cuda
