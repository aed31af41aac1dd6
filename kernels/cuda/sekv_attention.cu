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

using internal::AccumulateVecRow;
using internal::AsStream;
using internal::ChunkSoftmax;
using internal::ClearVecOutput;
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

// The block's chunk: entries [begin, end) of KV head g's concatenation (n of them, none when
// n <= 0), and the segments' table in shared memory.
struct SegmentChunk {
  const AttentionSegment* seg_s;
  const int* off_s;
  int num_segments;
  int begin, end, n;
  int64_t slot0;  // partial state of the group's query head i: slot0 + i * splits

  // Segment sgi's entries in the chunk: [Lo(sgi), Hi(sgi)), empty when Lo >= Hi.
  __device__ __forceinline__ int Lo(int sgi) const { return max(begin, off_s[sgi]); }
  __device__ __forceinline__ int Hi(int sgi) const { return min(end, off_s[sgi + 1]); }
};

// The table of KV head g (LoadSegmentTable, so every thread of the block must call it) and the
// chunk of the block's split, blockIdx.x.
__device__ __forceinline__ SegmentChunk LoadChunk(const AttentionSegment* segs, int g,
                                                  int num_segments, int group, int chunk,
                                                  int splits, AttentionSegment* seg_s, int* off_s) {
  const int split = blockIdx.x;
  LoadSegmentTable(segs, g, num_segments, seg_s, off_s);
  SegmentChunk c{seg_s, off_s, num_segments, split * chunk, 0, 0, 0};
  c.end = min(off_s[num_segments], c.begin + chunk);
  c.n = c.end - c.begin;
  c.slot0 = static_cast<int64_t>(g) * group * splits + split;
  return c;
}

// Score of entry j of the chunk (row `row` of segment sg) for every head of the group, q_s
// holding their queries: lanes across head_dim, -inf for a skipped row. Every lane of the warp
// must call it (WarpSum).
__device__ __forceinline__ void ScoreEntry(const AttentionSegment& sg, int row, int j,
                                           const float* q_s, int group, int hd, float scale,
                                           int chunk, float* s_s) {
  const int lane = threadIdx.x & 31;
  if (sg.skip != nullptr && sg.skip[row] != 0) {
    if (lane == 0) {
      for (int i = 0; i < group; ++i) s_s[i * chunk + j] = -INFINITY;
    }
    return;
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

// Output dim d of the chunk's unnormalised output, Σ e^{s - m} v[d], for every head of the
// group (in registers): the chunk's V rows in turn, skipped rows left out.
__device__ __forceinline__ void WriteOutputDim(const SegmentChunk& c, int d, int group, int hd,
                                               int chunk, int splits, const float* s_s,
                                               float* ws_o) {
  float acc[kMaxGroup];
#pragma unroll
  for (int i = 0; i < kMaxGroup; ++i) acc[i] = 0.0f;
  for (int sgi = 0; sgi < c.num_segments; ++sgi) {
    const int lo = c.Lo(sgi), hi = c.Hi(sgi);
    if (lo >= hi) continue;
    const AttentionSegment sg = c.seg_s[sgi];
    for (int e = lo; e < hi; ++e) {
      const int row = e - c.off_s[sgi];
      const int j = e - c.begin;
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
    if (i < group) ws_o[(c.slot0 + i * splits) * hd + d] = acc[i];
  }
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
  const int tid = threadIdx.x, warp = tid >> 5;
  const int g = blockIdx.y;
  for (int idx = tid; idx < group * hd; idx += kThreads) {
    q_s[idx] = q[static_cast<int64_t>(g) * group * hd + idx];
  }
  const SegmentChunk c = LoadChunk(segs, g, num_segments, group, chunk, splits, seg_s, off_s);
  if (c.n <= 0) {
    WriteEmptyChunk(c.slot0, splits, group, hd, want_out, ws_o, ws_m, ws_l);
    return;
  }

  // Scores: one warp per entry, lanes across head_dim, every head of the group at once.
  for (int sgi = 0; sgi < num_segments; ++sgi) {
    const int lo = c.Lo(sgi), hi = c.Hi(sgi);
    if (lo >= hi) continue;
    const AttentionSegment sg = seg_s[sgi];
    for (int e = lo + warp; e < hi; e += kWarps) {
      ScoreEntry(sg, e - off_s[sgi], e - c.begin, q_s, group, hd, scale, chunk, s_s);
    }
  }
  __syncthreads();
  ChunkSoftmax(s_s, chunk, c.n, group, c.slot0, splits, ws_m, ws_l);
  if (!want_out) return;

  // Unnormalised output: threads across head_dim (coalesced V rows), the group in registers.
  for (int d = tid; d < hd; d += kThreads) {
    WriteOutputDim(c, d, group, hd, chunk, splits, s_s, ws_o);
  }
}

// True when a segment's K and V rows can be read as 16-byte vectors: both bases 16-byte
// aligned, and rows a multiple of 16 bytes apart (a lane's 8 dims then start aligned too).
__device__ __forceinline__ bool SegmentAligned(const AttentionSegment& sg) {
  const int elem = sg.type == KvType::kBf16 ? 2 : 4;
  const uintptr_t bases = reinterpret_cast<uintptr_t>(sg.k) | reinterpret_cast<uintptr_t>(sg.v);
  return (bases & 15) == 0 && (static_cast<int64_t>(sg.stride) * elem) % 16 == 0;
}

// One pass of the vectorized kernel over rows of one segment: sg, its first entry `first` in
// the concatenation, its entries in the chunk before `hi`, the warp's first entry `base`.
struct SegmentPass {
  const AttentionSegment& sg;
  int first, hi, base;
  bool aligned;  // SegmentAligned(sg)

  // For this thread's rows of the pass: live[u] when the row is in the chunk and not skipped,
  // and then this lane's 8 values of K or V (`x`); zeros for the others.
  __device__ __forceinline__ void Load(const void* x, const VecLanes& lanes,
                                       float (&out)[kVecUnroll][8],
                                       bool (&live)[kVecUnroll]) const {
    const int64_t col = 8 * lanes.part;
#pragma unroll
    for (int u = 0; u < kVecUnroll; ++u) {
      const int e = lanes.RowAt(base, u), row = e - first;
      live[u] = e < hi && (sg.skip == nullptr || sg.skip[row] == 0);
      if (live[u]) {
        Load8(x, sg.type, static_cast<int64_t>(row) * sg.stride + col, aligned, out[u]);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) out[u][i] = 0.0f;
      }
    }
  }
};

// body(pass) for every pass over the rows of every segment in the chunk; a warp's rows of one
// pass lie in one segment.
template <typename Body>
__device__ __forceinline__ void ForEachSegmentPass(const SegmentChunk& c, const VecLanes& lanes,
                                                   Body&& body) {
  const int stride = lanes.rows_per_pass * kVecUnroll;
  for (int sgi = 0; sgi < c.num_segments; ++sgi) {
    const int lo = c.Lo(sgi), hi = c.Hi(sgi);
    if (lo >= hi) continue;
    const AttentionSegment sg = c.seg_s[sgi];
    const bool aligned = SegmentAligned(sg);
    for (int base = lo + lanes.warp_first; base < hi; base += stride) {
      body(SegmentPass{sg, c.off_s[sgi], hi, base, aligned});
    }
  }
}

// Scores of a pass's rows into s_s (log_count added, -inf for skipped rows). Every lane of the
// warp must call it (VecRowDots shuffles).
template <int kGroup>
__device__ __forceinline__ void ScoreSegmentPass(const SegmentPass& pass, const VecLanes& lanes,
                                                 const float (&qr)[kGroup][8], float scale,
                                                 int begin, int chunk, float* s_s) {
  float kf[kVecUnroll][8];
  bool live[kVecUnroll];
  pass.Load(pass.sg.k, lanes, kf, live);
#pragma unroll
  for (int u = 0; u < kVecUnroll; ++u) {
    float s[kGroup];
    VecRowDots<kGroup>(qr, kf[u], lanes.lanes_per_row, s);
    const int e = lanes.RowAt(pass.base, u), row = e - pass.first;
    if (lanes.part == 0 && e < pass.hi) {
      const float lc = pass.sg.log_count != nullptr && live[u] ? pass.sg.log_count[row] : 0.0f;
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        s_s[h * chunk + e - begin] = live[u] ? s[h] * scale + lc : -INFINITY;
      }
    }
  }
}

// acc += e^{s - m} v over a pass's live rows.
template <int kGroup>
__device__ __forceinline__ void AccumulateSegmentPass(const SegmentPass& pass,
                                                      const VecLanes& lanes, const float* s_s,
                                                      int begin, int chunk,
                                                      float (&acc)[kGroup][8]) {
  float vf[kVecUnroll][8];
  bool live[kVecUnroll];
  pass.Load(pass.sg.v, lanes, vf, live);
#pragma unroll
  for (int u = 0; u < kVecUnroll; ++u) {
    if (!live[u]) continue;  // skipped rows' V is never read (it may be anything)
    AccumulateVecRow<kGroup>(s_s, chunk, lanes.RowAt(pass.base, u) - begin, vf[u], acc);
  }
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
  const int g = blockIdx.y;
  const SegmentChunk c = LoadChunk(segs, g, num_segments, kGroup, chunk, splits, seg_s, off_s);
  if (c.n <= 0) {
    WriteEmptyChunk(c.slot0, splits, kGroup, hd, want_out, ws_o, ws_m, ws_l);
    return;
  }

  float qr[kGroup][8];
  LoadVecQueries<kGroup>(q + static_cast<int64_t>(g) * kGroup * hd, hd, lanes, qr);
  ForEachSegmentPass(c, lanes, [&](const SegmentPass& pass) {
    ScoreSegmentPass<kGroup>(pass, lanes, qr, scale, c.begin, chunk, s_s);
  });
  __syncthreads();
  ChunkSoftmax(s_s, chunk, c.n, kGroup, c.slot0, splits, ws_m, ws_l);
  if (!want_out) return;

  float acc[kGroup][8];
  ClearVecOutput<kGroup>(acc);
  ForEachSegmentPass(c, lanes, [&](const SegmentPass& pass) {
    AccumulateSegmentPass<kGroup>(pass, lanes, s_s, c.begin, chunk, acc);
  });
  StoreVecOutput<kGroup>(acc, lanes, hd, smem, ws_o, c.slot0, splits);
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
