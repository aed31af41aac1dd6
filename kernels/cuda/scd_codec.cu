// SCD consumer-side kernels (see scd_sekv_ops.h).
//   ReuseDecodeStoreKv: each block rebuilds kTokens tokens of one layer. The tokens' codes and
//   RoPE tables sit in shared memory; each thread owns a RoPE pair (i, i + head_dim/2) of one
//   KV head for K, or one column for V, and accumulates μ + Σ_j z_j D[j, col] for the kTokens
//   tokens at once, so every decoder element is read once per block (the decoder stays in L2:
//   rank × kv_dim × 4 bytes, 256 KB at rank 64 and kv_dim 1024). The rotated K and V are
//   stored as BF16 straight into the cache; no F32 K/V ever reaches HBM.
//   BiasActivation / BroadcastRow: the elementwise parts of the PATCH aligner, whose GEMMs
//   are cuBLAS F32 (CublasGemm::MatMulF32); PatchAlignerForward, host code only, is in
//   patch_aligner.cc.
#include <cuda_fp16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;
using internal::CeilDiv;

constexpr int kTokens = launch_checks::kReuseTokens;  // tokens per block
constexpr int kThreads = 128;  // threads per block

__global__ void __launch_bounds__(kThreads)
    ReuseDecodeKernel(const float* __restrict__ z_k, const float* __restrict__ z_v, int rows,
                      LowRankDecoder key, LowRankDecoder value, const int32_t* __restrict__ row_seq,
                      const int32_t* __restrict__ positions, KvCacheTable cache, int layer,
                      int num_kv_heads, int head_dim, const float* __restrict__ inv_freq) {
  extern __shared__ float smem[];
  const int half = head_dim / 2;
  const int kv_dim = num_kv_heads * head_dim;
  const int t0 = blockIdx.x * kTokens;
  const int nt = min(kTokens, rows - t0);
  float* zk_s = smem;                          // [kTokens][key.rank]
  float* zv_s = zk_s + kTokens * key.rank;     // [kTokens][value.rank]
  float* cos_s = zv_s + kTokens * value.rank;  // [kTokens][half]
  float* sin_s = cos_s + kTokens * half;       // [kTokens][half]
  for (int i = threadIdx.x; i < kTokens * key.rank; i += blockDim.x) {
    zk_s[i] = i < nt * key.rank ? z_k[static_cast<int64_t>(t0) * key.rank + i] : 0.0f;
  }
  for (int i = threadIdx.x; i < kTokens * value.rank; i += blockDim.x) {
    zv_s[i] = i < nt * value.rank ? z_v[static_cast<int64_t>(t0) * value.rank + i] : 0.0f;
  }
  for (int t = 0; t < kTokens; ++t) {  // RopeTable ends with __syncthreads (covers the loads)
    internal::RopeTable(t < nt ? positions[t0 + t] : 0, inv_freq, half, cos_s + t * half,
                        sin_s + t * half);
  }

  // K: one RoPE pair per thread and step.
  for (int idx = threadIdx.x; idx < num_kv_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx - h * half;
    const int ia = h * head_dim + i, ib = ia + half;
    float a[kTokens], b[kTokens];
    const float mu_a = key.mu[ia], mu_b = key.mu[ib];
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      a[t] = 0.0f;
      b[t] = 0.0f;
    }
    for (int j = 0; j < key.rank; ++j) {
      const float da = key.decoder[static_cast<int64_t>(j) * kv_dim + ia];
      const float db = key.decoder[static_cast<int64_t>(j) * kv_dim + ib];
#pragma unroll
      for (int t = 0; t < kTokens; ++t) {
        const float z = zk_s[t * key.rank + j];
        a[t] = fmaf(z, da, a[t]);
        b[t] = fmaf(z, db, b[t]);
      }
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t >= nt) break;
      const int r = t0 + t;
      const int seq = row_seq[r];
      Bf16* dst = cache.k[seq] + layer * cache.layer_stride[seq] +
                  static_cast<int64_t>(positions[r]) * kv_dim;
      const float x0 = a[t] + mu_a, x1 = b[t] + mu_b;  // z·D, then + μ (the twin's order)
      const float c = cos_s[t * half + i], s = sin_s[t * half + i];
      dst[ia] = internal::ToBf16(x0 * c - x1 * s);
      dst[ib] = internal::ToBf16(x1 * c + x0 * s);
    }
  }
  // V: one column per thread and step.
  for (int col = threadIdx.x; col < kv_dim; col += blockDim.x) {
    float a[kTokens];
#pragma unroll
    for (int t = 0; t < kTokens; ++t) a[t] = 0.0f;
    for (int j = 0; j < value.rank; ++j) {
      const float d = value.decoder[static_cast<int64_t>(j) * kv_dim + col];
#pragma unroll
      for (int t = 0; t < kTokens; ++t) a[t] = fmaf(zv_s[t * value.rank + j], d, a[t]);
    }
    const float mu = value.mu[col];
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t >= nt) break;
      const int r = t0 + t;
      const int seq = row_seq[r];
      Bf16* dst = cache.v[seq] + layer * cache.layer_stride[seq] +
                  static_cast<int64_t>(positions[r]) * kv_dim;
      dst[col] = internal::ToBf16(a[t] + mu);
    }
  }
}

__global__ void DecodeCodesKernel(const void* __restrict__ in, CodeFormat format, int rows,
                                  int cols, float* __restrict__ out) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (format == CodeFormat::kF16) {
      out[i] = __half2float(static_cast<const __half*>(in)[i]);
    } else if (format == CodeFormat::kInt8Row) {
      const __half* scales = static_cast<const __half*>(in);
      const int8_t* codes = reinterpret_cast<const int8_t*>(scales + rows);
      out[i] = static_cast<float>(codes[i]) * __half2float(scales[i / cols]);
    } else {
      out[i] = static_cast<const float*>(in)[i];
    }
  }
}

__global__ void BiasActivationKernel(float* y, const float* __restrict__ bias, int64_t count,
                                     int cols, bool silu) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float x = y[i];
    if (bias != nullptr) x += bias[i % cols];
    y[i] = silu ? internal::Silu(x) : x;
  }
}

__global__ void BroadcastRowKernel(float* y, const float* __restrict__ row, int64_t count,
                                   int cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = row[i % cols];
  }
}

}  // namespace

absl::Status ReuseDecodeStoreKv(const float* z_k, const float* z_v, int rows, LowRankDecoder key,
                                LowRankDecoder value, const int32_t* row_seq,
                                const int32_t* positions, KvCacheTable cache, int layer,
                                int num_kv_heads, int head_dim, const float* inv_freq,
                                StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::ReuseDecode(head_dim, key.rank, value.rank); !s.ok()) {
    return s;
  }
  const size_t smem = launch_checks::ReuseDecodeSharedBytes(head_dim, key.rank, value.rank);
  const unsigned blocks = static_cast<unsigned>(CeilDiv(rows, kTokens));
  ReuseDecodeKernel<<<blocks, kThreads, smem, AsStream(stream)>>>(z_k, z_v, rows, key, value,
                                                                  row_seq, positions, cache, layer,
                                                                  num_kv_heads, head_dim, inv_freq);
  return LaunchStatus("ReuseDecodeKernel");
}

absl::Status DecodeCodes(const void* in, CodeFormat format, int rows, int cols, float* out,
                         StreamHandle stream) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  if (count <= 0) return absl::OkStatus();
  DecodeCodesKernel<<<internal::GridFor(count, 256), 256, 0, AsStream(stream)>>>(in, format, rows,
                                                                                 cols, out);
  return LaunchStatus("DecodeCodesKernel");
}

absl::Status BiasActivation(float* y, const float* bias, int rows, int cols, Activation act,
                            StreamHandle stream) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  if (count <= 0 || (bias == nullptr && act == Activation::kNone)) return absl::OkStatus();
  BiasActivationKernel<<<internal::GridFor(count, 256), 256, 0, AsStream(stream)>>>(
      y, bias, count, cols, act == Activation::kSilu);
  return LaunchStatus("BiasActivationKernel");
}

absl::Status BroadcastRow(float* y, const float* row, int rows, int cols, StreamHandle stream) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  if (count <= 0) return absl::OkStatus();
  BroadcastRowKernel<<<internal::GridFor(count, 256), 256, 0, AsStream(stream)>>>(y, row, count,
                                                                                  cols);
  return LaunchStatus("BroadcastRowKernel");
}

}  // namespace scd::cuda
