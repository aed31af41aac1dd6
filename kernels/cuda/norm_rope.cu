// RMSNorm and rotary position embedding kernels (see ops.h).
//   RMSNorm: y = x / sqrt(mean(x^2) + eps) * gain, one block per row, F32 sum of squares.
//   RoPE (HF rotate-half, RoFormer eq. 34 with the halves split instead of interleaved): for
//   i < head_dim/2 the pair (x[i], x[i + head_dim/2]) is rotated by theta = pos * inv_freq[i],
//   theta computed as a float32 product exactly like the CPU twin (and HF), cos/sin in double
//   then rounded to float, so the rotation matrices are bit-identical to the twin's.
// RopeStoreKv fuses RoPE on K with the BF16 store into the KV cache (layout in ops.h), which is
// also the consumer-side path for K/V that arrive pre-RoPE from outside (SCD).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;

using internal::kMaxHalf;
using internal::RopeTable;
using launch_checks::RopeHeadDim;

__global__ void RmsNormKernel(const float* x, const float* __restrict__ gain, float* y,
                              Bf16* __restrict__ y_bf16, int dim, float eps) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float* in = x + r * dim;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += in[i] * in[i];
  ss = internal::BlockSum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float value = in[i] * inv * gain[i];
    if (y != nullptr) y[r * dim + i] = value;
    if (y_bf16 != nullptr) y_bf16[r * dim + i] = internal::ToBf16(value);
  }
}

__global__ void RopeKernel(float* x, int num_heads, int head_dim, int64_t row_stride,
                           const int32_t* __restrict__ positions,
                           const float* __restrict__ inv_freq) {
  __shared__ float cos_s[kMaxHalf], sin_s[kMaxHalf];
  const int t = blockIdx.x;
  const int half = head_dim / 2;
  RopeTable(positions[t], inv_freq, half, cos_s, sin_s);
  float* row = x + t * row_stride;
  for (int idx = threadIdx.x; idx < num_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx - h * half;
    float* a = row + h * head_dim + i;
    float* b = a + half;
    const float a0 = *a, b0 = *b;
    *a = a0 * cos_s[i] - b0 * sin_s[i];
    *b = b0 * cos_s[i] + a0 * sin_s[i];
  }
}

__global__ void RopeStoreKvKernel(const float* __restrict__ k_pre, const float* __restrict__ v,
                                  int64_t in_stride, const int32_t* __restrict__ row_seq,
                                  const int32_t* __restrict__ positions, KvCacheTable cache,
                                  int layer, int num_kv_heads, int head_dim,
                                  const float* __restrict__ inv_freq) {
  __shared__ float cos_s[kMaxHalf], sin_s[kMaxHalf];
  const int r = blockIdx.x;
  const int half = head_dim / 2;
  const int kv_dim = num_kv_heads * head_dim;
  const int32_t pos = positions[r];
  RopeTable(pos, inv_freq, half, cos_s, sin_s);
  const int seq = row_seq[r];
  const int64_t offset = layer * cache.layer_stride[seq] + static_cast<int64_t>(pos) * kv_dim;
  Bf16* k_dst = cache.k[seq] + offset;
  Bf16* v_dst = cache.v[seq] + offset;
  const float* k_row = k_pre + r * in_stride;
  const float* v_row = v + r * in_stride;
  for (int idx = threadIdx.x; idx < num_kv_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx - h * half;
    const int ia = h * head_dim + i, ib = ia + half;
    const float a0 = k_row[ia], b0 = k_row[ib];
    k_dst[ia] = internal::ToBf16(a0 * cos_s[i] - b0 * sin_s[i]);
    k_dst[ib] = internal::ToBf16(b0 * cos_s[i] + a0 * sin_s[i]);
  }
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) v_dst[i] = internal::ToBf16(v_row[i]);
}

}  // namespace

absl::Status RmsNorm(const float* x, const float* gain, float* y, Bf16* y_bf16, int rows, int dim,
                     float eps, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  const int threads = dim >= 1024 ? 256 : (dim >= 256 ? 128 : 64);
  RmsNormKernel<<<rows, threads, 0, AsStream(stream)>>>(x, gain, y, y_bf16, dim, eps);
  return LaunchStatus("RmsNormKernel");
}

absl::Status ApplyRope(float* x, int tokens, int num_heads, int head_dim, int64_t row_stride,
                       const int32_t* positions, const float* inv_freq, StreamHandle stream) {
  if (tokens <= 0) return absl::OkStatus();
  if (absl::Status s = RopeHeadDim(head_dim); !s.ok()) return s;
  RopeKernel<<<tokens, 128, 0, AsStream(stream)>>>(x, num_heads, head_dim, row_stride, positions,
                                                   inv_freq);
  return LaunchStatus("RopeKernel");
}

absl::Status RopeStoreKv(const float* k_pre, const float* v, int64_t in_stride, int rows,
                         const int32_t* row_seq, const int32_t* positions, KvCacheTable cache,
                         int layer, int num_kv_heads, int head_dim, const float* inv_freq,
                         StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  if (absl::Status s = RopeHeadDim(head_dim); !s.ok()) return s;
  RopeStoreKvKernel<<<rows, 128, 0, AsStream(stream)>>>(
      k_pre, v, in_stride, row_seq, positions, cache, layer, num_kv_heads, head_dim, inv_freq);
  return LaunchStatus("RopeStoreKvKernel");
}

}  // namespace scd::cuda
