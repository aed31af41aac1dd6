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
// bandwidth (docs/RESULTS.md, "GPU").
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_split.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/split_plan.h"

namespace scd::cuda {
namespace {

using internal::AccumulateVecRow;
using internal::AsStream;
using internal::CeilDiv;
using internal::ChunkSoftmax;
using internal::ClearVecOutput;
using internal::kVecThreads;
using internal::kVecUnroll;
using internal::LoadBf16x8;
using internal::LoadVecQueries;
using internal::StoreVecOutput;
using internal::VecLanes;
using internal::VecLayout;
using internal::VecRowDots;
using internal::Widen8;
using internal::WriteEmptyChunk;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kHeadsPerPass = 8;  // query heads accumulated per register pass

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
    WriteEmptyChunk(slot0, splits, group, hd, /*want_out=*/true, ws_o, ws_m, ws_l);
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

// The K and V rows a vectorized block reads: the chunk's n rows from k and v (this lane's 8
// dims of each), kv_dim elements apart.
struct DecodeVecRows {
  const Bf16* k;
  const Bf16* v;
  int kv_dim, n;
  bool aligned;  // both 16-byte aligned (LoadBf16x8)

  // This lane's 16 bytes of K or V (`x`) in each row of the pass at `base`; zeros past the chunk.
  __device__ __forceinline__ void LoadPass(const Bf16* x, const VecLanes& lanes, int base,
                                           uint4 (&raw)[kVecUnroll]) const {
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      const int j = lanes.RowAt(base, u);
      if (j < n) {
        raw[u] = LoadBf16x8(x + static_cast<int64_t>(j) * kv_dim, aligned);
      } else {
        raw[u] = make_uint4(0, 0, 0, 0);
      }
    }
  }
};

// Scores of the rows of the pass at `base` into s_s (the group's rows of `chunk`). Every lane of
// the warp must call it (VecRowDots shuffles).
template <int kGroup>
__device__ __forceinline__ void ScoreDecodePass(const DecodeVecRows& rows, const VecLanes& lanes,
                                                int base, const float (&qr)[kGroup][8], float scale,
                                                int chunk, float* s_s) {
  uint4 raw[kVecUnroll];
  rows.LoadPass(rows.k, lanes, base, raw);
#pragma unroll
  for (int u = 0; u < kVecUnroll; ++u) {
    float kf[8], s[kGroup];
    Widen8(raw[u], kf);
    VecRowDots<kGroup>(qr, kf, lanes.lanes_per_row, s);
    const int j = lanes.RowAt(base, u);
    if (lanes.part == 0 && j < rows.n) {
#pragma unroll
      for (int h = 0; h < kGroup; ++h) s_s[h * chunk + j] = s[h] * scale;
    }
  }
}

// acc += e^{s - m} v over the rows of the pass at `base`.
template <int kGroup>
__device__ __forceinline__ void AccumulateDecodePass(const DecodeVecRows& rows,
                                                     const VecLanes& lanes, int base,
                                                     const float* s_s, int chunk,
                                                     float (&acc)[kGroup][8]) {
  uint4 raw[kVecUnroll];
  rows.LoadPass(rows.v, lanes, base, raw);
#pragma unroll
  for (int u = 0; u < kVecUnroll; ++u) {
    const int j = lanes.RowAt(base, u);
    if (j >= rows.n) continue;
    float vf[8];
    Widen8(raw[u], vf);
    AccumulateVecRow<kGroup>(s_s, chunk, j, vf, acc);
  }
}

// The vectorized split kernel (DecodeImpl::kVectorized), for the same (split, KV head,
// sequence) blocks and partial states as the generic one, in attention_split.cuh's layout.
template <int kGroup>
__global__ void __launch_bounds__(kVecThreads)
    DecodeAttentionVecKernel(const float* __restrict__ q, int64_t q_stride, KvCacheTable cache,
                             int layer, const int32_t* __restrict__ lengths, int num_heads,
                             int num_kv_heads, int hd, int window, float scale, int chunk,
                             int splits, float* __restrict__ ws_o, float* __restrict__ ws_m,
                             float* __restrict__ ws_l) {
  extern __shared__ float smem[];
  float* s_s = smem;  // [kGroup][chunk]: scores, then exp(s - m); then StoreVecOutput's sums
  const VecLanes lanes = VecLayout(hd);
  const int split = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const KeyRange keys = SplitKeys(lengths[b], window, splits, chunk, split);
  const int n = keys.end - keys.begin;
  const int64_t slot0 = (static_cast<int64_t>(b) * num_heads + g * kGroup) * splits + split;
  if (n <= 0) {
    WriteEmptyChunk(slot0, splits, kGroup, hd, /*want_out=*/true, ws_o, ws_m, ws_l);
    return;
  }
  const int kv_dim = num_kv_heads * hd;
  const int64_t off = layer * cache.layer_stride[b] + static_cast<int64_t>(keys.begin) * kv_dim +
                      g * hd + 8 * lanes.part;
  const Bf16* k = cache.k[b] + off;
  const Bf16* v = cache.v[b] + off;
  // Rows are kv_dim (a multiple of 8) elements apart, so the first row decides for all.
  const bool aligned =
      ((reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) & 15) == 0;
  const DecodeVecRows rows{k, v, kv_dim, n, aligned};
  const int stride = lanes.rows_per_pass * kVecUnroll;

  float qr[kGroup][8];
  LoadVecQueries<kGroup>(q + b * q_stride + static_cast<int64_t>(g) * kGroup * hd, hd, lanes, qr);
  for (int base = lanes.warp_first; base < n; base += stride) {
    ScoreDecodePass<kGroup>(rows, lanes, base, qr, scale, chunk, s_s);
  }
  __syncthreads();
  ChunkSoftmax(s_s, chunk, n, kGroup, slot0, splits, ws_m, ws_l);

  float acc[kGroup][8];
  ClearVecOutput<kGroup>(acc);
  for (int base = lanes.warp_first; base < n; base += stride) {
    AccumulateDecodePass<kGroup>(rows, lanes, base, s_s, chunk, acc);
  }
  StoreVecOutput<kGroup>(acc, lanes, hd, smem, ws_o, slot0, splits);
}

template <int kGroup>
absl::Status LaunchVectorized(const float* q, int64_t q_stride, KvCacheTable cache, int layer,
                              const int32_t* lengths, int batch, int num_heads, int num_kv_heads,
                              int hd, int window, float scale, const SplitPlan& plan, float* ws_o,
                              float* ws_m, float* ws_l, StreamHandle stream) {
  const size_t smem = internal::VecSharedBytes(kGroup, plan.chunk, hd);
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
      launch_checks::TakesVectorized("DecodeAttention", num_heads, num_kv_heads, head_dim, impl);
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
    absl::Status s = internal::WithVecGroup(group, "DecodeAttention", [&](auto group_constant) {
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
