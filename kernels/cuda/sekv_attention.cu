// SekvAttention (see scd_sekv_ops.h): SEKV's mixed-resolution softmax for one decode step.
// A KV head's entries are the concatenation of its segments (anchors, span summaries, pinned
// tokens, rebuilt tokens, window), of mixed element type (F32 or BF16). The concatenation is
// cut into chunks (split_plan::SekvChunk); the block (chunk, KV head g) scores its entries for
// all query heads of g's group (K read once per group), keeps the partial softmax state per head
// (max m, Σ e^{s-m}, Σ e^{s-m} v), and a combine kernel merges the chunks exactly, as
// DecodeAttention does (flash-decoding), and gives the log-sum-exp the routing gate needs.
// Skipped rows score -inf and so weigh exactly 0, as in the twin, which leaves them out.
// Two split kernels, chosen as DecodeAttention's (DecodeImpl): the generic one (a warp per
// entry, lanes across head_dim; then one thread per output dim walking the chunk's V rows)
// takes every shape SekvShape allows; the vectorized one (attention_split.cuh: 16-byte loads,
// many rows in flight) takes groups 1, 2, 4 and 8 with head_dim 8 * 2^i, and is kAuto's choice
// there.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_split.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "kernels/cuda/split_plan.h"

namespace scd::cuda {
namespace {

using internal::AsStream;
using internal::ChunkSoftmax;
using internal::kVecThreads;
using internal::kVecUnroll;
using internal::Load8;
using internal::LoadAs;
using internal::LoadVecQueries;
using internal::StoreVecOutput;
using internal::VecLanes;
using internal::VecLayout;
using internal::VecRowDots;
using internal::WriteEmptyChunk;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = kSekvMaxGroup;                       // query heads per KV head
constexpr int kMaxSegments = launch_checks::kSekvMaxSegments;  // segments per KV head

// Rows per block and blocks per KV head (split_plan.h; 64 splits fill the GPU at 8 heads).
int ChunkFor(int max_rows) { return split_plan::SekvChunk(max_rows); }
int SplitsFor(int max_rows) { return split_plan::SekvSplits(max_rows); }

// KV head g's segments into shared memory, with off_s[i] = the rows before segment i (and
// off_s[num_segments] = all of them). Ends with the block synchronised.
__device__ void LoadSegmentTable(const AttentionSegment* segs, int g, int num_segments,
                                 AttentionSegment* seg_s, int* off_s) {
  if (threadIdx.x == 0) {
    int total = 0;
    for (int i = 0; i < num_segments; ++i) {
      seg_s[i] = segs[static_cast<int64_t>(g) * num_segments + i];
      off_s[i] = total;
      total += max(seg_s[i].rows, 0);
    }
    off_s[num_segments] = total;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    SekvAttentionSplitKernel(const float* __restrict__ q, const AttentionSegment* __restrict__ segs,
                             int num_segments, int num_heads, int num_kv_heads, int hd, float scale,
                             int chunk, int splits, bool want_out, float* __restrict__ ws_o,
                             float* __restrict__ ws_m, float* __restrict__ ws_l) {
  extern __shared__ float smem[];
  __shared__ AttentionSegment seg_s[kMaxSegments];
  __shared__ int off_s[kMaxSegments + 1];
  const int group = num_heads / num_kv_heads;
  float* q_s = smem;               // [group][hd]
  float* s_s = smem + group * hd;  // [group][chunk]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, g = blockIdx.y;
  for (int idx = tid; idx < group * hd; idx += kThreads) {
    q_s[idx] = q[static_cast<int64_t>(g) * group * hd + idx];
  }
  LoadSegmentTable(segs, g, num_segments, seg_s, off_s);
  const int begin = split * chunk;
  const int end = min(off_s[num_segments], begin + chunk);
  const int n = end - begin;
  const int64_t slot0 = static_cast<int64_t>(g) * group * splits + split;
  if (n <= 0) {
    WriteEmptyChunk(slot0, splits, group, hd, want_out, ws_o, ws_m, ws_l);
    return;
  }

  // Scores: one warp per entry, lanes across head_dim, every head of the group at once.
  for (int sgi = 0; sgi < num_segments; ++sgi) {
    const int lo = max(begin, off_s[sgi]), hi = min(end, off_s[sgi + 1]);
    if (lo >= hi) continue;
    const AttentionSegment sg = seg_s[sgi];
    for (int e = lo + warp; e < hi; e += kWarps) {
      const int row = e - off_s[sgi];
      const int j = e - begin;
      if (sg.skip != nullptr && sg.skip[row] != 0) {
        if (lane == 0) {
          for (int i = 0; i < group; ++i) s_s[i * chunk + j] = -INFINITY;
        }
        continue;
      }
      float acc[kMaxGroup];
#pragma unroll
      for (int i = 0; i < kMaxGroup; ++i) acc[i] = 0.0f;
      const int64_t base = static_cast<int64_t>(row) * sg.stride;
      for (int d = lane; d < hd; d += 32) {
        const float kd = LoadAs(sg.k, sg.type, base + d);
#pragma unroll
        for (int i = 0; i < kMaxGroup; ++i) {
          if (i < group) acc[i] += q_s[i * hd + d] * kd;
        }
      }
      const float lc = sg.log_count != nullptr ? sg.log_count[row] : 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxGroup; ++i) {
        if (i < group) {
          const float s = internal::WarpSum(acc[i]);
          if (lane == 0) s_s[i * chunk + j] = s * scale + lc;
        }
      }
    }
  }
  __syncthreads();
  ChunkSoftmax(s_s, chunk, n, group, slot0, splits, ws_m, ws_l);
  if (!want_out) return;

  // Unnormalised output: threads across head_dim (coalesced V rows), the group in registers.
  for (int d = tid; d < hd; d += kThreads) {
    float acc[kMaxGroup];
#pragma unroll
    for (int i = 0; i < kMaxGroup; ++i) acc[i] = 0.0f;
    for (int sgi = 0; sgi < num_segments; ++sgi) {
      const int lo = max(begin, off_s[sgi]), hi = min(end, off_s[sgi + 1]);
      if (lo >= hi) continue;
      const AttentionSegment sg = seg_s[sgi];
      for (int e = lo; e < hi; ++e) {
        const int row = e - off_s[sgi];
        const int j = e - begin;
        if (sg.skip != nullptr && sg.skip[row] != 0) continue;
        const float vd = LoadAs(sg.v, sg.type, static_cast<int64_t>(row) * sg.stride + d);
#pragma unroll
        for (int i = 0; i < kMaxGroup; ++i) {
          if (i < group) acc[i] += s_s[i * chunk + j] * vd;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kMaxGroup; ++i) {
      if (i < group) ws_o[(slot0 + i * splits) * hd + d] = acc[i];
    }
  }
}

// True when a segment's K and V rows can be read as 16-byte vectors: both bases 16-byte
// aligned, and rows a multiple of 16 bytes apart (a lane's 8 dims then start aligned too).
__device__ __forceinline__ bool SegmentAligned(const AttentionSegment& sg) {
  const int elem = sg.type == KvType::kBf16 ? 2 : 4;
  const uintptr_t bases = reinterpret_cast<uintptr_t>(sg.k) | reinterpret_cast<uintptr_t>(sg.v);
  return (bases & 15) == 0 && (static_cast<int64_t>(sg.stride) * elem) % 16 == 0;
}

// The vectorized split kernel (DecodeImpl::kVectorized), for the same blocks and partial
// states as the generic one, in attention_split.cuh's layout. A warp's rows of one pass lie in
// one segment (the loop runs segment by segment), so the type, alignment and skips are the
// segment's.
template <int kGroup>
__global__ void __launch_bounds__(kVecThreads)
    SekvAttentionVecKernel(const float* __restrict__ q, const AttentionSegment* __restrict__ segs,
                           int num_segments, int hd, float scale, int chunk, int splits,
                           bool want_out, float* __restrict__ ws_o, float* __restrict__ ws_m,
                           float* __restrict__ ws_l) {
  extern __shared__ float smem[];
  __shared__ AttentionSegment seg_s[kMaxSegments];
  __shared__ int off_s[kMaxSegments + 1];
  float* s_s = smem;  // [kGroup][chunk]: scores, then e^{s - m}; then StoreVecOutput's sums
  const VecLanes lanes = VecLayout(hd);
  const int split = blockIdx.x, g = blockIdx.y;
  LoadSegmentTable(segs, g, num_segments, seg_s, off_s);
  const int begin = split * chunk;
  const int end = min(off_s[num_segments], begin + chunk);
  const int n = end - begin;
  const int64_t slot0 = static_cast<int64_t>(g) * kGroup * splits + split;
  if (n <= 0) {
    WriteEmptyChunk(slot0, splits, kGroup, hd, want_out, ws_o, ws_m, ws_l);
    return;
  }
  const int stride = lanes.rows_per_pass * kVecUnroll;
  const int64_t col = 8 * lanes.part;
  // Entry e of the concatenation, for pass `base` and unrolled row u; the whole warp shares
  // base, so every lane takes part in the shuffles.
  auto entry_at = [&](int base, int u) {
    return base + lanes.row_in_warp + u * lanes.rows_per_pass;
  };
  // For each row of pass `base` in segment sg (its first entry at `first`, entries before `hi`
  // in this chunk): live[u] when the row is in the chunk and not skipped, and then this lane's 8
  // values of K or V (`x`); zeros for the others.
  auto load_pass = [&](const AttentionSegment& sg, const void* x, int first, int hi, int base,
                       bool aligned, float(&out)[kVecUnroll][8], bool(&live)[kVecUnroll]) {
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      const int e = entry_at(base, u), row = e - first;
      live[u] = e < hi && (sg.skip == nullptr || sg.skip[row] == 0);
      if (live[u]) {
        Load8(x, sg.type, static_cast<int64_t>(row) * sg.stride + col, aligned, out[u]);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) out[u][i] = 0.0f;
      }
    }
  };

  // body(sg, first, hi, base, aligned) for every pass over the rows of every segment in this
  // chunk: segment sg, its first entry `first`, its entries in the chunk before `hi`.
  auto each_pass = [&](auto&& body) {
    for (int sgi = 0; sgi < num_segments; ++sgi) {
      const int lo = max(begin, off_s[sgi]), hi = min(end, off_s[sgi + 1]);
      if (lo >= hi) continue;
      const AttentionSegment sg = seg_s[sgi];
      const bool aligned = SegmentAligned(sg);
      for (int base = lo + lanes.warp_first; base < hi; base += stride) {
        body(sg, off_s[sgi], hi, base, aligned);
      }
    }
  };

  float qr[kGroup][8];
  LoadVecQueries<kGroup>(q + static_cast<int64_t>(g) * kGroup * hd, hd, lanes, qr);
  each_pass([&](const AttentionSegment& sg, int first, int hi, int base, bool aligned) {
    float kf[kVecUnroll][8];
    bool live[kVecUnroll];
    load_pass(sg, sg.k, first, hi, base, aligned, kf, live);
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      float s[kGroup];
      VecRowDots<kGroup>(qr, kf[u], lanes.lanes_per_row, s);
      const int e = entry_at(base, u), row = e - first;
      if (lanes.part == 0 && e < hi) {
        const float lc = sg.log_count != nullptr && live[u] ? sg.log_count[row] : 0.0f;
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          s_s[h * chunk + e - begin] = live[u] ? s[h] * scale + lc : -INFINITY;
        }
      }
    }
  });
  __syncthreads();
  ChunkSoftmax(s_s, chunk, n, kGroup, slot0, splits, ws_m, ws_l);
  if (!want_out) return;

  float acc[kGroup][8];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[h][i] = 0.0f;
  }
  each_pass([&](const AttentionSegment& sg, int first, int hi, int base, bool aligned) {
    float vf[kVecUnroll][8];
    bool live[kVecUnroll];
    load_pass(sg, sg.v, first, hi, base, aligned, vf, live);
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      if (!live[u]) continue;  // skipped rows' V is never read (it may be anything)
      const int j = entry_at(base, u) - begin;
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float p = s_s[h * chunk + j];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[h][i] += p * vf[u][i];
      }
    }
  });
  StoreVecOutput<kGroup>(acc, lanes, hd, smem, ws_o, slot0, splits);
}

__global__ void SekvAttentionCombineKernel(const float* __restrict__ ws_o,
                                           const float* __restrict__ ws_m,
                                           const float* __restrict__ ws_l, int splits, int hd,
                                           float* __restrict__ out, float* __restrict__ lse) {
  const int h = blockIdx.x;
  const int64_t base = static_cast<int64_t>(h) * splits;
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, ws_m[base + s]);
  float total = 0.0f;
  if (mx != -INFINITY) {
    for (int s = 0; s < splits; ++s) {
      const float m = ws_m[base + s];
      if (m != -INFINITY) total += ws_l[base + s] * expf(m - mx);
    }
  }
  if (lse != nullptr && threadIdx.x == 0) {
    lse[h] = total > 0.0f ? mx + logf(total) : kSekvEmptyLse;
  }
  if (out == nullptr) return;
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    if (total > 0.0f) {
      for (int s = 0; s < splits; ++s) {
        const float m = ws_m[base + s];
        if (m != -INFINITY) acc += ws_o[(base + s) * hd + d] * expf(m - mx);
      }
    }
    out[static_cast<int64_t>(h) * hd + d] = acc * inv;
  }
}

template <int kGroup>
absl::Status LaunchVectorized(const float* q, const AttentionSegment* segments, int num_segments,
                              int num_kv_heads, int hd, float scale, int chunk, int splits,
                              bool want_out, float* ws_o, float* ws_m, float* ws_l,
                              StreamHandle stream) {
  const size_t smem = internal::VecSharedBytes(kGroup, chunk, hd);
  const dim3 grid(splits, num_kv_heads);
  SekvAttentionVecKernel<kGroup><<<grid, kVecThreads, smem, AsStream(stream)>>>(
      q, segments, num_segments, hd, scale, chunk, splits, want_out, ws_o, ws_m, ws_l);
  return LaunchStatus("SekvAttentionVecKernel");
}

}  // namespace

int64_t SekvAttentionWorkspaceFloats(int num_heads, int head_dim, int max_rows) {
  if (num_heads <= 0) return 0;
  return static_cast<int64_t>(num_heads) * SplitsFor(max_rows) * (head_dim + 2);
}

absl::Status SekvAttention(const float* q, const AttentionSegment* segments, int num_segments,
                           int num_heads, int num_kv_heads, int head_dim, int max_rows,
                           DecodeImpl impl, float* out, float* lse, float* workspace,
                           int64_t workspace_floats, StreamHandle stream) {
  if (num_heads <= 0 || (out == nullptr && lse == nullptr)) return absl::OkStatus();
  if (absl::Status s = launch_checks::SekvShape("SekvAttention", num_heads, num_kv_heads, head_dim);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = launch_checks::SekvSegments(num_segments, max_rows); !s.ok()) return s;
  absl::StatusOr<bool> vectorized =
      launch_checks::TakesVectorized("SekvAttention", num_heads, num_kv_heads, head_dim, impl);
  if (!vectorized.ok()) return vectorized.status();
  const int64_t need = SekvAttentionWorkspaceFloats(num_heads, head_dim, max_rows);
  if (absl::Status s = launch_checks::Workspace("SekvAttention", workspace_floats, need, "floats");
      !s.ok()) {
    return s;
  }
  const int chunk = ChunkFor(max_rows), splits = SplitsFor(max_rows);
  const int group = num_heads / num_kv_heads;
  const int64_t slots = static_cast<int64_t>(num_heads) * splits;
  float* ws_o = workspace;
  float* ws_m = ws_o + slots * head_dim;
  float* ws_l = ws_m + slots;
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const bool want_out = out != nullptr;
  if (*vectorized) {
    absl::Status s = internal::WithVecGroup(group, "SekvAttention", [&](auto group_constant) {
      return LaunchVectorized<decltype(group_constant)::value>(
          q, segments, num_segments, num_kv_heads, head_dim, scale, chunk, splits, want_out, ws_o,
          ws_m, ws_l, stream);
    });
    if (!s.ok()) return s;
  } else {
    const size_t smem = sizeof(float) * static_cast<size_t>(group) * (head_dim + chunk);
    const dim3 grid(splits, num_kv_heads);
    SekvAttentionSplitKernel<<<grid, kThreads, smem, AsStream(stream)>>>(
        q, segments, num_segments, num_heads, num_kv_heads, head_dim, scale, chunk, splits,
        want_out, ws_o, ws_m, ws_l);
    if (absl::Status s = LaunchStatus("SekvAttentionSplitKernel"); !s.ok()) return s;
  }
  SekvAttentionCombineKernel<<<num_heads, 128, 0, AsStream(stream)>>>(ws_o, ws_m, ws_l, splits,
                                                                      head_dim, out, lse);
  return LaunchStatus("SekvAttentionCombineKernel");
}

}  // namespace scd::cuda
