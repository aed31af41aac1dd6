// What the split-K attention kernels share: DecodeAttention's (attention_decode.cu) and
// SekvAttention's (sekv_attention.cu), each a generic and a vectorized kernel. A block scores
// one chunk of K/V rows of one KV head for the kGroup query heads of its GQA group, turns the
// scores into e^{s - m} (ChunkSoftmax) and writes its partial state (m, Σ e^{s-m},
// Σ e^{s-m} v) per query head; a combine kernel merges the chunks.
// The vectorized kernels' layout (kVecThreads threads a block):
//   - A row of head_dim elements is head_dim / 8 lanes, each holding 8 dims as one 16-byte
//     vector (BF16) or two (F32); a warp covers 32 / (head_dim / 8) rows at once, the block
//     kVecWarps times that, and each thread keeps kVecUnroll rows in flight.
//   - Scores: a lane dots its 8 dims with the group's queries (kept in registers), the row's
//     lanes sum by shuffles (VecRowDots).
//   - Output: a lane accumulates p * v for its 8 dims over its rows; the rows of a warp sum by
//     shuffles and the warps through shared memory in a fixed order (StoreVecOutput), so the
//     result is the same every run, as CUDA graph replay needs.
// They need head_dim / 8 to be a power of two up to 32 and kGroup * head_dim <= 1024
// (launch_checks::VectorizedAttentionSupports). Internal: only .cu files include it.
#ifndef SCD_KERNELS_CUDA_ATTENTION_VEC_CUH_
#define SCD_KERNELS_CUDA_ATTENTION_VEC_CUH_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda::internal {

constexpr int kVecThreads = 256;
constexpr int kVecWarps = kVecThreads / 32;
constexpr int kVecUnroll = 4;  // rows in flight per thread

// The partial state of a chunk without rows (m = -inf, l = 0, and o = 0 when the output is
// wanted) for the group's query heads, whose slots are slot0 + i * splits.
__device__ __forceinline__ void WriteEmptyChunk(int64_t slot0, int splits, int group, int hd,
                                                bool want_out, float* ws_o, float* ws_m,
                                                float* ws_l) {
  for (int i = threadIdx.x; i < group; i += blockDim.x) {
    ws_m[slot0 + i * splits] = -INFINITY;
    ws_l[slot0 + i * splits] = 0.0f;
  }
  if (!want_out) return;
  for (int idx = threadIdx.x; idx < group * hd; idx += blockDim.x) {
    ws_o[(slot0 + (idx / hd) * splits) * hd + idx % hd] = 0.0f;
  }
}

// Per head (a warp each): the max and sum over the chunk's n scores in s_s's row; the scores
// become e^{s - m}, 0 for rows scored -inf (left out), and for all rows when every one is
// (the max then stays -inf and the sum 0). Ends with the block synchronised.
__device__ __forceinline__ void ChunkSoftmax(float* s_s, int chunk, int n, int group, int64_t slot0,
                                             int splits, float* ws_m, float* ws_l) {
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int i = threadIdx.x >> 5; i < group; i += warps) {
    float* row = s_s + i * chunk;
    float mx = -INFINITY;
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, row[j]);
    mx = WarpMax(mx);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = mx == -INFINITY ? 0.0f : expf(row[j] - mx);
      row[j] = p;
      sum += p;
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      ws_m[slot0 + i * splits] = sum > 0.0f ? mx : -INFINITY;
      ws_l[slot0 + i * splits] = sum;
    }
  }
  __syncthreads();
}

// Where a thread sits in the vectorized kernels' row layout.
struct VecLanes {
  int lanes_per_row;  // head_dim / 8
  int rows_per_pass;  // rows the block covers at once
  int warp_first;     // first row of this thread's warp in a pass
  int row_in_warp;    // this thread's row within its warp's rows
  int part;           // this lane's dims: [8 part, 8 part + 8)

  // This thread's row u (< kVecUnroll) of the pass whose warp starts at `base`: base is the same
  // for the whole warp, so every lane takes part in the row's shuffles.
  __device__ __forceinline__ int RowAt(int base, int u) const {
    return base + row_in_warp + u * rows_per_pass;
  }
};

__device__ __forceinline__ VecLanes VecLayout(int hd) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  VecLanes l;
  l.lanes_per_row = hd / 8;
  const int rows_per_warp = 32 / l.lanes_per_row;
  l.rows_per_pass = kVecWarps * rows_per_warp;
  l.warp_first = warp * rows_per_warp;
  l.row_in_warp = lane / l.lanes_per_row;
  l.part = lane % l.lanes_per_row;
  return l;
}

// 8 BF16 at p as one 16-byte vector. `aligned` (the same for every row a loop reads): p is
// 16-byte aligned; else the vector is assembled from 2-byte loads, so K/V in an unaligned
// buffer are slower, never wrong.
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

// Element i of a BF16 or F32 array as a float.
__device__ __forceinline__ float LoadAs(const void* p, KvType type, int64_t i) {
  return type == KvType::kBf16 ? LoadBf16(static_cast<const Bf16*>(p) + i)
                               : static_cast<const float*>(p)[i];
}

// Elements [i, i + 8) of a BF16 or F32 array as floats; `aligned` as for LoadBf16x8 (for F32,
// two 16-byte vectors).
__device__ __forceinline__ void Load8(const void* p, KvType type, int64_t i, bool aligned,
                                      float out[8]) {
  if (type == KvType::kBf16) {
    Widen8(LoadBf16x8(static_cast<const Bf16*>(p) + i, aligned), out);
    return;
  }
  const float* f = static_cast<const float*>(p) + i;
  if (aligned) {
    const uint4 a = reinterpret_cast<const uint4*>(f)[0], b = reinterpret_cast<const uint4*>(f)[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = __uint_as_float(w[k]);
    return;
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = f[k];
}

// s[h] = <q_h, k> over the whole row, in every lane of the row: each lane's 8 dims (qr, kf),
// summed over the row's lanes. Every lane of the warp must call it (shuffles).
template <int kGroup>
__device__ __forceinline__ void VecRowDots(const float (&qr)[kGroup][8], const float (&kf)[8],
                                           int lanes_per_row, float (&s)[kGroup]) {
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
}

// The group's queries, this lane's 8 dims of each: q holds kGroup rows of hd floats.
template <int kGroup>
__device__ __forceinline__ void LoadVecQueries(const float* q, int hd, const VecLanes& l,
                                               float (&qr)[kGroup][8]) {
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) qr[h][i] = q[h * hd + 8 * l.part + i];
  }
}

// The output accumulators, zeroed.
template <int kGroup>
__device__ __forceinline__ void ClearVecOutput(float (&acc)[kGroup][8]) {
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.0f;
  }
}

// acc[h] += p_h v for one row (chunk row j) of this lane's 8 dims of V, p_h its weight e^{s - m}
// in s_s's row of head h.
template <int kGroup>
__device__ __forceinline__ void AccumulateVecRow(const float* s_s, int chunk, int j,
                                                 const float (&vf)[8], float (&acc)[kGroup][8]) {
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    const float p = s_s[h * chunk + j];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] += p * vf[i];
  }
}

// The block's partial output: every thread's acc summed over the warp's rows (shuffles), then
// over the warps in order (red_s: kVecWarps * kGroup * hd floats of shared memory, which may
// overlay the scores: this waits for the whole block first), into ws_o's rows of query heads
// slot0 + h * splits. Every thread of the block must call it.
template <int kGroup>
__device__ __forceinline__ void StoreVecOutput(float (&acc)[kGroup][8], const VecLanes& l, int hd,
                                               float* red_s, float* ws_o, int64_t slot0,
                                               int splits) {
  for (int offset = 16; offset >= l.lanes_per_row; offset >>= 1) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[h][i] += __shfl_xor_sync(0xffffffffu, acc[h][i], offset);
    }
  }
  __syncthreads();  // red_s may overlay the scores, read until here
  const int warp = threadIdx.x >> 5;
  if (l.row_in_warp == 0) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
#pragma unroll
      for (int i = 0; i < 8; ++i) red_s[(warp * kGroup + h) * hd + 8 * l.part + i] = acc[h][i];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kGroup * hd; idx += kVecThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kVecWarps; ++w) o += red_s[w * kGroup * hd + idx];
    const int h = idx / hd, d = idx - h * hd;
    ws_o[(slot0 + h * splits) * hd + d] = o;
  }
}

// launch(std::integral_constant<int, group>) for the groups the vectorized kernels are built
// for (1, 2, 4 and 8).
template <typename Launch>
absl::Status WithVecGroup(int group, const char* kernel, Launch&& launch) {
  const std::string unsupported = absl::StrCat(kernel, " supports groups 1, 2, 4 and 8");
  return launch_checks::WithIntConstant<1, 2, 4, 8>(group, unsupported.c_str(), launch);
}

// Dynamic shared memory of a vectorized block: the scores of `chunk` rows, or the warps'
// outputs, whichever is larger (they overlay).
inline size_t VecSharedBytes(int group, int chunk, int hd) {
  const size_t scores = static_cast<size_t>(group) * chunk;
  const size_t outputs = static_cast<size_t>(kVecWarps) * group * hd;
  return sizeof(float) * (scores > outputs ? scores : outputs);
}

}  // namespace scd::cuda::internal

#endif  // SCD_KERNELS_CUDA_ATTENTION_VEC_CUH_
