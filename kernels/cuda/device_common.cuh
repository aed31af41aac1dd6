// Device-side helpers shared by the kernels of this folder: BF16 <-> float on the device for
// the storage-only Bf16 (bf16.h), warp and block reductions, and grid sizing. Internal: only
// .cu files in kernels/cuda include it.
#ifndef SCD_KERNELS_CUDA_DEVICE_COMMON_CUH_
#define SCD_KERNELS_CUDA_DEVICE_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/launch_checks.h"

namespace scd::cuda::internal {

inline cudaStream_t AsStream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over `count` items: enough to fill any current GPU, no more.
inline unsigned GridFor(int64_t count, int threads) {
  const int64_t blocks = CeilDiv(count, threads);
  return static_cast<unsigned>(blocks < 4096 ? (blocks < 1 ? 1 : blocks) : 4096);
}

__device__ __forceinline__ float LoadBf16(const Bf16* p) {
  return __uint_as_float(static_cast<uint32_t>(p->bits) << 16);
}

__device__ __forceinline__ float ToFloat(Bf16 b) {
  return __uint_as_float(static_cast<uint32_t>(b.bits) << 16);
}

__device__ __forceinline__ Bf16 ToBf16(float f) {
  return Bf16{__bfloat16_as_ushort(__float2bfloat16_rn(f))};
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ double WarpSumDouble(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

__device__ __forceinline__ double BlockSumDouble(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSumDouble(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? scratch[lane] : 0.0;
  return WarpSumDouble(v);
}

constexpr int kMaxHalf = launch_checks::kRopeMaxHalf;  // RoPE tables: head_dim / 2 angles

// cos/sin of positions * inv_freq for one token into shared memory.
__device__ __forceinline__ void RopeTable(int32_t position, const float* inv_freq, int half,
                                          float* cos_s, float* sin_s) {
  const float pos = static_cast<float>(position);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = pos * inv_freq[i];  // float32, as HF computes it
    double s, c;
    sincos(static_cast<double>(angle), &s, &c);
    cos_s[i] = static_cast<float>(c);
    sin_s[i] = static_cast<float>(s);
  }
  __syncthreads();
}

__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }

}  // namespace scd::cuda::internal

#endif  // SCD_KERNELS_CUDA_DEVICE_COMMON_CUH_
