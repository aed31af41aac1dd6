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
constexpr int kThreads = 128;                         // threads per block

// The block's tokens [t0, t0 + nt) and their cache rows.
struct ReuseTokens {
  const int32_t* row_seq;
  const int32_t* positions;
  KvCacheTable cache;
  int layer, kv_dim, t0, nt;

  // Token t's row of K (`bases` cache.k) or V (cache.v) in the cache.
  __device__ __forceinline__ Bf16* Row(Bf16* const* bases, int t) const {
    const int r = t0 + t;
    const int seq = row_seq[r];
    return bases[seq] + layer * cache.layer_stride[seq] +
           static_cast<int64_t>(positions[r]) * kv_dim;
  }
};

// The block's shared memory: codes [kTokens][rank] of K and V, RoPE tables [kTokens][half].
struct ReuseShared {
  float *zk, *zv, *cos, *sin;
};

// The tokens' codes (zeros past the batch's last row) and RoPE tables into shared memory. Every
// thread of the block must call it: it ends with RopeTable's barrier, which publishes the codes.
__device__ __forceinline__ void StageCodes(const float* z_k, const float* z_v, int rank_k,
                                           int rank_v, const ReuseTokens& tokens, int half,
                                           const float* inv_freq, const ReuseShared& s) {
  const int t0 = tokens.t0, nt = tokens.nt;
  for (int i = threadIdx.x; i < kTokens * rank_k; i += blockDim.x) {
    s.zk[i] = i < nt * rank_k ? z_k[static_cast<int64_t>(t0) * rank_k + i] : 0.0f;
  }
  for (int i = threadIdx.x; i < kTokens * rank_v; i += blockDim.x) {
    s.zv[i] = i < nt * rank_v ? z_v[static_cast<int64_t>(t0) * rank_v + i] : 0.0f;
  }
  for (int t = 0; t < kTokens; ++t) {
    internal::RopeTable(t < nt ? tokens.positions[t0 + t] : 0, inv_freq, half, s.cos + t * half,
                        s.sin + t * half);
  }
}

// K's RoPE pair (i, i + half) of KV head h for every token: z·D, then + μ (the twin's order),
// rotated and stored as BF16.
__device__ __forceinline__ void RebuildKeyPair(const LowRankDecoder& key, int h, int i, int half,
                                               int head_dim, const ReuseShared& s,
                                               const ReuseTokens& tokens) {
  const int ia = h * head_dim + i, ib = ia + half;
  float a[kTokens], b[kTokens];
  const float mu_a = key.mu[ia], mu_b = key.mu[ib];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    a[t] = 0.0f;
    b[t] = 0.0f;
  }
  for (int j = 0; j < key.rank; ++j) {
    const float da = key.decoder[static_cast<int64_t>(j) * tokens.kv_dim + ia];
    const float db = key.decoder[static_cast<int64_t>(j) * tokens.kv_dim + ib];
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      const float z = s.zk[t * key.rank + j];
      a[t] = fmaf(z, da, a[t]);
      b[t] = fmaf(z, db, b[t]);
    }
  }
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    if (t >= tokens.nt) break;
    Bf16* dst = tokens.Row(tokens.cache.k, t);
    const float x0 = a[t] + mu_a, x1 = b[t] + mu_b;
    const float c = s.cos[t * half + i], sn = s.sin[t * half + i];
    dst[ia] = internal::ToBf16(x0 * c - x1 * sn);
    dst[ib] = internal::ToBf16(x1 * c + x0 * sn);
  }
}

// V's column `col` for every token: z·D + μ, stored as BF16.
__device__ __forceinline__ void RebuildValueColumn(const LowRankDecoder& value, int col,
                                                   const float* zv_s, const ReuseTokens& tokens) {
  float a[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) a[t] = 0.0f;
  for (int j = 0; j < value.rank; ++j) {
    const float d = value.decoder[static_cast<int64_t>(j) * tokens.kv_dim + col];
#pragma unroll
    for (int t = 0; t < kTokens; ++t) a[t] = fmaf(zv_s[t * value.rank + j], d, a[t]);
  }
  const float mu = value.mu[col];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    if (t >= tokens.nt) break;
    tokens.Row(tokens.cache.v, t)[col] = internal::ToBf16(a[t] + mu);
  }
}

__global__ void __launch_bounds__(kThreads)
    ReuseDecodeKernel(const float* __restrict__ z_k, const float* __restrict__ z_v, int rows,
                      LowRankDecoder key, LowRankDecoder value, const int32_t* __restrict__ row_seq,
                      const int32_t* __restrict__ positions, KvCacheTable cache, int layer,
                      int num_kv_heads, int head_dim, const float* __restrict__ inv_freq) {
  extern __shared__ float smem[];
  const int half = head_dim / 2;
  const int kv_dim = num_kv_heads * head_dim;
  const int t0 = blockIdx.x * kTokens;
  const ReuseTokens tokens{row_seq, positions, cache, layer, kv_dim, t0, min(kTokens, rows - t0)};
  ReuseShared s;
  s.zk = smem;                          // [kTokens][key.rank]
  s.zv = s.zk + kTokens * key.rank;     // [kTokens][value.rank]
  s.cos = s.zv + kTokens * value.rank;  // [kTokens][half]
  s.sin = s.cos + kTokens * half;       // [kTokens][half]
  StageCodes(z_k, z_v, key.rank, value.rank, tokens, half, inv_freq, s);
  // K: one RoPE pair per thread and step.
  for (int idx = threadIdx.x; idx < num_kv_heads * half; idx += blockDim.x) {
    const int h = idx / half;
    RebuildKeyPair(key, h, idx - h * half, half, head_dim, s, tokens);
  }
  // V: one column per thread and step.
  for (int col = threadIdx.x; col < kv_dim; col += blockDim.x) {
    RebuildValueColumn(value, col, s.zv, tokens);
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
