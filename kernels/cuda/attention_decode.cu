// Decode attention: one new query per sequence against that sequence's KV cache (see ops.h),
// split-K ("flash-decoding", Dao et al., 2023): the key range is cut into chunks handled by
// separate blocks so that a single long sequence still fills the GPU. Each block handles one
// (sequence, KV head, chunk) for all query heads of the GQA group, so K/V are read from HBM
// once per group, and writes its partial softmax state per query head:
//   m_s = max_j s_j,  l_s = sum_j exp(s_j - m_s),  o_s = sum_j exp(s_j - m_s) v_j.
// The combine kernel merges the chunks exactly: M = max_s m_s, w_s = exp(m_s - M),
//   out = sum_s w_s o_s / sum_s w_s l_s.
// Scores are F32 dot products of the F32 query with the BF16 cache (widened), scaled by
// 1/sqrt(head_dim); the twin is cpu::CausalAttention with one query.
// Two split kernels (DecodeImpl): the generic one (a warp per key with 2-byte loads, then one
// thread per output dim walking the chunk's V rows in turn) takes any shape; the vectorized one
// (16-byte loads, many K and V rows in flight a block) is what a long context needs, since the
// step reads the whole cache: the generic kernel read a 32K cache at 0.05 of the H200's copy
// bandwidth (docs/RESULTS.md, issue 7).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/split_plan.h"

namespace scd::cuda {
namespace {

using internal::AsStream;
using internal::CeilDiv;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kHeadsPerPass = 8;  // query heads accumulated per register pass

constexpr int kVecThreads = 256;
constexpr int kVecWarps = kVecThreads / 32;
constexpr int kVecUnroll = 4;  // 16-byte K or V vectors in flight per thread

using SplitPlan = split_plan::DecodeSplits;
SplitPlan Plan(int batch, int max_length, int num_heads, int num_kv_heads) {
  return split_plan::Decode(batch, max_length, num_heads, num_kv_heads);
}

// Keys [begin, end) of one split of a row of `len` keys. The row's own keys [lo, len) are
// spread over all the splits, in multiples of 32 of at least 64, never above the `chunk` the
// shared memory holds. So a launch planned for a longer max_length (a bucket, one CUDA graph
// for many steps) still splits a row's keys as finely as a launch planned for that row; the
// plan's chunk * splits covers max_length.
struct KeyRange {
  int begin, end;
};
__device__ __forceinline__ KeyRange SplitKeys(int len, int window, int splits, int chunk,
                                              int split) {
  const int lo = window > 0 ? max(0, len - window) : 0;
  const int per_split = (len - lo + splits - 1) / splits;
  const int row_chunk = min(chunk, max(64, (per_split + 31) / 32 * 32));
  const int begin = lo + split * row_chunk;
  return KeyRange{begin, min(len, begin + row_chunk)};
}

// The partial state of a split without keys: m = -inf, l = 0, o = 0 for the group's heads,
// whose slots are slot0 + i * splits.
__device__ void WriteEmptySplit(int64_t slot0, int splits, int group, int hd, float* ws_o,
                                float* ws_m, float* ws_l) {
  for (int i = threadIdx.x; i < group; i += blockDim.x) {
    ws_m[slot0 + i * splits] = -INFINITY;
    ws_l[slot0 + i * splits] = 0.0f;
  }
  for (int idx = threadIdx.x; idx < group * hd; idx += blockDim.x) {
    const int i = idx / hd, d = idx - i * hd;
    ws_o[(slot0 + i * splits) * hd + d] = 0.0f;
  }
}

// Per head (a warp each): the max and sum of the n scores in s_s's row; the scores become
// exp(s - m). Ends with the block synchronised.
__device__ void ChunkSoftmax(float* s_s, int chunk, int n, int group, int64_t slot0, int splits,
                             float* ws_m, float* ws_l) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int i = threadIdx.x >> 5; i < group; i += warps) {
    float* row = s_s + i * chunk;
    float mx = -INFINITY;
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, row[j]);
    mx = internal::WarpMax(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = expf(row[j] - mx);
      row[j] = p;
      sum += p;
    }
    sum = internal::WarpSum(sum);
    if (lane == 0) {
      ws_m[slot0 + i * splits] = mx;
      ws_l[slot0 + i * splits] = sum;
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    DecodeAttentionSplitKernel(const float* __restrict__ q, int64_t q_stride, KvCacheTable cache,
                               int layer, const int32_t* __restrict__ lengths, int num_heads,
                               int num_kv_heads, int hd, int window, float scale, int chunk,
                               int splits, float* __restrict__ ws_o, float* __restrict__ ws_m,
                               float* __restrict__ ws_l) {
  extern __shared__ float smem[];
  const int group = num_heads / num_kv_heads;
  float* q_s = smem;               // [group][hd]
  float* s_s = smem + group * hd;  // [group][chunk]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const KeyRange keys = SplitKeys(lengths[b], window, splits, chunk, split);
  const int n = keys.end - keys.begin;
  // Partial state of query head (g * group + i) of sequence b for this split: slot0 + i * splits.
  const int64_t slot0 = (static_cast<int64_t>(b) * num_heads + g * group) * splits + split;
  if (n <= 0) {
    WriteEmptySplit(slot0, splits, group, hd, ws_o, ws_m, ws_l);
    return;
  }
  const int kv_dim = num_kv_heads * hd;
  const int64_t off =
      layer * cache.layer_stride[b] + static_cast<int64_t>(keys.begin) * kv_dim + g * hd;
  const Bf16* k = cache.k[b] + off;
  const Bf16* v = cache.v[b] + off;
  const float* qb = q + b * q_stride + g * group * hd;
  for (int idx = tid; idx < group * hd; idx += kThreads) q_s[idx] = qb[idx];
  __syncthreads();

  // Scores: one warp per key, lanes across head_dim.
  for (int j = warp; j < n; j += kWarps) {
    const Bf16* kr = k + static_cast<int64_t>(j) * kv_dim;
    for (int i0 = 0; i0 < group; i0 += kHeadsPerPass) {
      float acc[kHeadsPerPass];
#pragma unroll
      for (int u = 0; u < kHeadsPerPass; ++u) acc[u] = 0.0f;
      for (int d = lane; d < hd; d += 32) {
        const float kd = internal::LoadBf16(kr + d);
#pragma unroll
        for (int u = 0; u < kHeadsPerPass; ++u) {
          if (i0 + u < group) acc[u] += q_s[(i0 + u) * hd + d] * kd;
        }
      }
#pragma unroll
      for (int u = 0; u < kHeadsPerPass; ++u) {
        if (i0 + u < group) {
          const float s = internal::WarpSum(acc[u]);
          if (lane == 0) s_s[(i0 + u) * chunk + j] = s * scale;
        }
      }
    }
  }
  __syncthreads();
  ChunkSoftmax(s_s, chunk, n, group, slot0, splits, ws_m, ws_l);

  // Unnormalised output: threads across head_dim (coalesced V reads), heads in registers.
  for (int d = tid; d < hd; d += kThreads) {
    for (int i0 = 0; i0 < group; i0 += kHeadsPerPass) {
      float acc[kHeadsPerPass];
#pragma unroll
      for (int u = 0; u < kHeadsPerPass; ++u) acc[u] = 0.0f;
      for (int j = 0; j < n; ++j) {
        const float vd = internal::LoadBf16(v + static_cast<int64_t>(j) * kv_dim + d);
#pragma unroll
        for (int u = 0; u < kHeadsPerPass; ++u) {
          if (i0 + u < group) acc[u] += s_s[(i0 + u) * chunk + j] * vd;
        }
      }
#pragma unroll
      for (int u = 0; u < kHeadsPerPass; ++u) {
        if (i0 + u < group) ws_o[(slot0 + (i0 + u) * splits) * hd + d] = acc[u];
      }
    }
  }
}

// 8 BF16 at p as one 16-byte vector. `aligned` (the same for the whole block): p is 16-byte
// aligned; else the vector is assembled from 2-byte loads, so a cache table pointing into an
// unaligned buffer is slower, never wrong.
__device__ __forceinline__ uint4 LoadBf16x8(const Bf16* p, bool aligned) {
  if (aligned) return *reinterpret_cast<const uint4*>(p);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = static_cast<uint32_t>(p[2 * i].bits) | (static_cast<uint32_t>(p[2 * i + 1].bits) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void Widen8(const uint4& v, float out[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(w[i] << 16);
    out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// The vectorized split kernel (DecodeImpl::kVectorized), for the same (split, KV head,
// sequence) blocks and partial states as the generic one. A K or V row of head_dim BF16 is
// head_dim / 8 lanes each holding one 16-byte vector (8 dims), so a warp covers 32 / (hd / 8)
// rows at once and the block 8 times that; each thread keeps kVecUnroll vectors in flight.
//   Scores: each lane dots its 8 dims with the group's queries (in registers), the row's lanes
//   sum by shuffles.
//   Output: each lane accumulates p * v over its rows for its 8 dims and the group's heads;
//   the rows of a warp sum by shuffles, the warps through shared memory in a fixed order (the
//   result is the same every run, as CUDA graph replay needs).
template <int kGroup>
__global__ void __launch_bounds__(kVecThreads)
    DecodeAttentionVecKernel(const float* __restrict__ q, int64_t q_stride, KvCacheTable cache,
                             int layer, const int32_t* __restrict__ lengths, int num_heads,
                             int num_kv_heads, int hd, int window, float scale, int chunk,
                             int splits, float* __restrict__ ws_o, float* __restrict__ ws_m,
                             float* __restrict__ ws_l) {
  extern __shared__ float smem[];
  float* s_s = smem;    // [kGroup][chunk]: scores, then exp(s - m)
  float* red_s = smem;  // [kVecWarps][kGroup * hd]: each warp's output, once s_s is done
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int lanes_per_row = hd / 8;  // a power of two in [1, 32]
  const int rows_per_warp = 32 / lanes_per_row;
  const int rows_per_pass = kVecWarps * rows_per_warp;
  const int part = lane % lanes_per_row;  // this lane's dims: [8 part, 8 part + 8)
  const int row_in_warp = lane / lanes_per_row;
  const int split = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const KeyRange keys = SplitKeys(lengths[b], window, splits, chunk, split);
  const int n = keys.end - keys.begin;
  const int64_t slot0 = (static_cast<int64_t>(b) * num_heads + g * kGroup) * splits + split;
  if (n <= 0) {
    WriteEmptySplit(slot0, splits, kGroup, hd, ws_o, ws_m, ws_l);
    return;
  }
  const int kv_dim = num_kv_heads * hd;
  const int64_t off =
      layer * cache.layer_stride[b] + static_cast<int64_t>(keys.begin) * kv_dim + g * hd + 8 * part;
  const Bf16* k = cache.k[b] + off;
  const Bf16* v = cache.v[b] + off;
  // Rows are kv_dim (a multiple of 8) elements apart, so the first row decides for all.
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) == 0;
  // Rows [base + row_in_warp + u * rows_per_pass] for u < kVecUnroll: base is the same for the
  // whole warp, so every lane takes part in the shuffles.
  const int warp_first = warp * rows_per_warp;
  const int stride = rows_per_pass * kVecUnroll;

  float qr[kGroup][8];
  const float* qb = q + b * q_stride + static_cast<int64_t>(g) * kGroup * hd + 8 * part;
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) qr[h][i] = qb[h * hd + i];
  }
  for (int base = warp_first; base < n; base += stride) {
    uint4 kv[kVecUnroll];
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      const int j = base + row_in_warp + u * rows_per_pass;
      kv[u] = j < n ? LoadBf16x8(k + static_cast<int64_t>(j) * kv_dim, aligned)
                    : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      float kf[8];
      Widen8(kv[u], kf);
      float s[kGroup];
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        s[h] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) s[h] += qr[h][i] * kf[i];
      }
      for (int offset = lanes_per_row >> 1; offset > 0; offset >>= 1) {
#pragma unroll
        for (int h = 0; h < kGroup; ++h) s[h] += __shfl_xor_sync(0xffffffffu, s[h], offset);
      }
      const int j = base + row_in_warp + u * rows_per_pass;
      if (part == 0 && j < n) {
#pragma unroll
        for (int h = 0; h < kGroup; ++h) s_s[h * chunk + j] = s[h] * scale;
      }
    }
  }
  __syncthreads();
  ChunkSoftmax(s_s, chunk, n, kGroup, slot0, splits, ws_m, ws_l);

  float acc[kGroup][8];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.0f;
  }
  for (int base = warp_first; base < n; base += stride) {
    uint4 vv[kVecUnroll];
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      const int j = base + row_in_warp + u * rows_per_pass;
      vv[u] = j < n ? LoadBf16x8(v + static_cast<int64_t>(j) * kv_dim, aligned)
                    : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      const int j = base + row_in_warp + u * rows_per_pass;
      if (j >= n) continue;
      float vf[8];
      Widen8(vv[u], vf);
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float p = s_s[h * chunk + j];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] += p * vf[i];
      }
    }
  }
  // The warp's rows into its lanes [0, lanes_per_row), then the warps in order.
  for (int offset = 16; offset >= lanes_per_row; offset >>= 1) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] += __shfl_xor_sync(0xffffffffu, acc[h][i], offset);
    }
  }
  __syncthreads();  // red_s overlays s_s, read until here
  if (row_in_warp == 0) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
#pragma unroll
      for (int i = 0; i < 8; ++i) red_s[(warp * kGroup + h) * hd + 8 * part + i] = acc[h][i];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < kGroup * hd; idx += kVecThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kVecWarps; ++w) o += red_s[w * kGroup * hd + idx];
    const int h = idx / hd, d = idx - h * hd;
    ws_o[(slot0 + h * splits) * hd + d] = o;
  }
}

// launch(std::integral_constant<int, group>) for the groups the vectorized kernel is built for.
template <typename Launch>
absl::Status WithVectorizedGroup(int group, Launch&& launch) {
  if (group == 1) return launch(std::integral_constant<int, 1>{});
  if (group == 2) return launch(std::integral_constant<int, 2>{});
  if (group == 4) return launch(std::integral_constant<int, 4>{});
  if (group == 8) return launch(std::integral_constant<int, 8>{});
  return absl::InvalidArgumentError("DecodeAttentionVecKernel supports groups 1, 2, 4 and 8");
}

template <int kGroup>
absl::Status LaunchVectorized(const float* q, int64_t q_stride, KvCacheTable cache, int layer,
                              const int32_t* lengths, int batch, int num_heads, int num_kv_heads,
                              int hd, int window, float scale, const SplitPlan& plan, float* ws_o,
                              float* ws_m, float* ws_l, StreamHandle stream) {
  const size_t smem =
      sizeof(float) * std::max<size_t>(static_cast<size_t>(kGroup) * plan.chunk,
                                       static_cast<size_t>(kVecWarps) * kGroup * hd);
  const dim3 grid(plan.splits, num_kv_heads, batch);
  DecodeAttentionVecKernel<kGroup><<<grid, kVecThreads, smem, AsStream(stream)>>>(
      q, q_stride, cache, layer, lengths, num_heads, num_kv_heads, hd, window, scale, plan.chunk,
      plan.splits, ws_o, ws_m, ws_l);
  return LaunchStatus("DecodeAttentionVecKernel");
}

__global__ void DecodeAttentionCombineKernel(const float* __restrict__ ws_o,
                                             const float* __restrict__ ws_m,
                                             const float* __restrict__ ws_l, int splits,
                                             int num_heads, int hd, float* __restrict__ out,
                                             int64_t out_stride) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t base = (static_cast<int64_t>(b) * num_heads + h) * splits;
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, ws_m[base + s]);
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float m = ws_m[base + s];
    if (m != -INFINITY) total += ws_l[base + s] * expf(m - mx);
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;  // no key at all (length 0): zeros
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float m = ws_m[base + s];
      if (m != -INFINITY) acc += ws_o[(base + s) * hd + d] * expf(m - mx);
    }
    out[b * out_stride + h * hd + d] = acc * inv;
  }
}

}  // namespace

int64_t DecodeAttentionWorkspaceFloats(int batch, int max_length, int num_heads, int num_kv_heads,
                                       int head_dim) {
  return split_plan::DecodeWorkspaceFloats(batch, max_length, num_heads, num_kv_heads, head_dim);
}

absl::Status DecodeAttention(const float* q, int64_t q_stride, KvCacheTable cache, int layer,
                             const int32_t* lengths, int batch, int max_length, int num_heads,
                             int num_kv_heads, int head_dim, int window, DecodeImpl impl,
                             float* out, int64_t out_stride, float* workspace,
                             int64_t workspace_floats, StreamHandle stream) {
  if (batch <= 0) return absl::OkStatus();
  if (absl::Status s = split_plan::CheckDecodeShape(batch, num_heads, num_kv_heads, head_dim);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<bool> vectorized =
      launch_checks::DecodeVectorized(num_heads, num_kv_heads, head_dim, impl);
  if (!vectorized.ok()) return vectorized.status();
  const int group = num_heads / num_kv_heads;
  const int64_t need =
      DecodeAttentionWorkspaceFloats(batch, max_length, num_heads, num_kv_heads, head_dim);
  if (absl::Status s =
          launch_checks::Workspace("DecodeAttention", workspace_floats, need, "floats");
      !s.ok()) {
    return s;
  }
  const SplitPlan plan = Plan(batch, max_length, num_heads, num_kv_heads);
  const int64_t slots = static_cast<int64_t>(batch) * num_heads * plan.splits;
  float* ws_o = workspace;
  float* ws_m = ws_o + slots * head_dim;
  float* ws_l = ws_m + slots;
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  if (*vectorized) {
    absl::Status s = WithVectorizedGroup(group, [&](auto group_constant) {
      return LaunchVectorized<decltype(group_constant)::value>(
          q, q_stride, cache, layer, lengths, batch, num_heads, num_kv_heads, head_dim, window,
          scale, plan, ws_o, ws_m, ws_l, stream);
    });
    if (!s.ok()) return s;
  } else {
    const size_t smem = sizeof(float) * (static_cast<size_t>(group) * head_dim +
                                         static_cast<size_t>(group) * plan.chunk);
    const dim3 grid(plan.splits, num_kv_heads, batch);
    DecodeAttentionSplitKernel<<<grid, kThreads, smem, AsStream(stream)>>>(
        q, q_stride, cache, layer, lengths, num_heads, num_kv_heads, head_dim, window, scale,
        plan.chunk, plan.splits, ws_o, ws_m, ws_l);
    if (absl::Status s = LaunchStatus("DecodeAttentionSplitKernel"); !s.ok()) return s;
  }
  const dim3 combine_grid(num_heads, batch);
  DecodeAttentionCombineKernel<<<combine_grid, 128, 0, AsStream(stream)>>>(
      ws_o, ws_m, ws_l, plan.splits, num_heads, head_dim, out, out_stride);
  return LaunchStatus("DecodeAttentionCombineKernel");
}

}  // namespace scd::cuda
