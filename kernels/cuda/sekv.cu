// SEKV decode-step kernels (see scd_sekv_ops.h); the mixed-resolution softmax itself,
// SekvAttention, is sekv_attention.cu.
//   SekvRouteGate: one block per (KV head, span tile). It forms q_route = P_kᵀ (P_q q) for the
//   group's query heads in shared memory (the twin's order of summation), then one warp per
//   span computes <q_route, k̄> and <q, k̄> for each head and the gate's maximum.
//   SpanRebuildRows: one block per job, threads across head_dim, the rank loop in the twin's
//   order.
#include <algorithm>
#include <cmath>
#include <cub/cub.cuh>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_split.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;
using internal::CeilDiv;
using internal::LoadAs;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = kSekvMaxGroup;  // query heads per KV head

constexpr int kSpansPerBlock = 64;

__global__ void __launch_bounds__(kThreads) SekvRouteGateKernel(
    const float* __restrict__ q, const float* __restrict__ p_q, const float* __restrict__ p_k,
    int route_dim, const void* __restrict__ summary_k, KvType summary_type, int64_t summary_stride,
    const float* __restrict__ log_count, const int32_t* __restrict__ remaining,
    const RouterGateParams* __restrict__ gates, const float* __restrict__ lse, int num_spans,
    int num_heads, int num_kv_heads, int hd, float scale, float* __restrict__ alpha) {
  extern __shared__ float smem[];
  const int group = num_heads / num_kv_heads;
  const int g = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* q_s = smem;               // [group][hd]
  float* qr_s = q_s + group * hd;  // [group][hd]: P_kᵀ P_q q
  float* z_s = qr_s + group * hd;  // [group][route_dim]: P_q q
  const float* pq = p_q + static_cast<int64_t>(g) * route_dim * hd;
  const float* pk = p_k + static_cast<int64_t>(g) * route_dim * hd;
  for (int idx = tid; idx < group * hd; idx += kThreads) {
    q_s[idx] = q[static_cast<int64_t>(g) * group * hd + idx];
  }
  __syncthreads();
  for (int idx = tid; idx < group * route_dim; idx += kThreads) {
    const int i = idx / route_dim, r = idx - i * route_dim;
    float z = 0.0f;
    for (int c = 0; c < hd; ++c) z += pq[static_cast<int64_t>(r) * hd + c] * q_s[i * hd + c];
    z_s[idx] = z;
  }
  __syncthreads();
  for (int idx = tid; idx < group * hd; idx += kThreads) {
    const int i = idx / hd, c = idx - i * hd;
    float acc = 0.0f;
    for (int r = 0; r < route_dim; ++r)
      acc += z_s[i * route_dim + r] * pk[static_cast<int64_t>(r) * hd + c];
    qr_s[idx] = acc;
  }
  __syncthreads();
  const RouterGateParams gate = gates[g];
  const int s_end = min(num_spans, (blockIdx.x + 1) * kSpansPerBlock);
  for (int s = blockIdx.x * kSpansPerBlock + warp; s < s_end; s += kWarps) {
    const int64_t gs = static_cast<int64_t>(g) * num_spans + s;
    if (remaining[gs] == 0) {
      if (lane == 0) alpha[gs] = 0.0f;
      continue;
    }
    const int64_t kbar = static_cast<int64_t>(s) * summary_stride + g * hd;
    const float lc = log_count[gs];
    float best = 0.0f;
    for (int i = 0; i < group; ++i) {
      float bil = 0.0f, dot = 0.0f;
      for (int c = lane; c < hd; c += 32) {
        const float k = LoadAs(summary_k, summary_type, kbar + c);
        bil += qr_s[i * hd + c] * k;
        dot += q_s[i * hd + c] * k;
      }
      bil = internal::WarpSum(bil);
      dot = internal::WarpSum(dot);
      const float s_hat = dot * scale + lc;
      const float z =
          bil + gate.w_size * lc + gate.w_share * (s_hat - lse[g * group + i]) + gate.bias;
      best = fmaxf(best, 1.0f / (1.0f + expf(-z)));
    }
    if (lane == 0) alpha[gs] = best;
  }
}

__global__ void SpanRebuildKernel(const RebuildJob* __restrict__ jobs, int hd) {
  const RebuildJob job = jobs[blockIdx.x];
  for (int c = threadIdx.x; c < hd; c += blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < job.rank; ++r)
      acc += job.us_row[r] * job.vt[static_cast<int64_t>(r) * hd + c];
    job.out[c] = acc;
  }
}

__global__ void MergeAttentionKernel(const float* out_a, const float* __restrict__ lse_a,
                                     const float* __restrict__ out_b,
                                     const float* __restrict__ lse_b, int hd, float* out) {
  const int h = blockIdx.x;
  const float la = lse_a[h], lb = lse_b[h];
  const float m = fmaxf(la, lb);
  const bool empty = m <= 0.5f * kSekvEmptyLse;
  const float wa = empty ? 0.0f : expf(la - m), wb = empty ? 0.0f : expf(lb - m);
  const float inv = empty ? 0.0f : 1.0f / (wa + wb);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    const int64_t i = static_cast<int64_t>(h) * hd + d;
    out[i] = (wa * out_a[i] + wb * out_b[i]) * inv;
  }
}

__global__ void SummaryResetKernel(const float* __restrict__ base_lc,
                                   const int32_t* __restrict__ remaining, int total,
                                   float* __restrict__ step_lc, uint8_t* __restrict__ step_skip) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= total) return;
  step_lc[i] = base_lc[i];
  step_skip[i] = remaining[i] <= 0;
}

__global__ void SummaryEditKernel(const int32_t* __restrict__ remaining,
                                  const int32_t* __restrict__ edits, int num_edits, int total,
                                  float* __restrict__ step_lc, uint8_t* __restrict__ step_skip) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= num_edits) return;
  const int i = edits[2 * j];
  if (i < 0 || i >= total || edits[2 * j + 1] <= 0) return;
  const int left = remaining[i] - edits[2 * j + 1];
  step_skip[i] = left <= 0;
  if (left > 0) step_lc[i] = logf(static_cast<float>(left));
}

// ---- SekvZoom: one block per KV head ----
//
// The CPU tier the bases live in is host memory the device reads over the bus, where one read
// takes microseconds. So the kernel never walks host memory a value at a time: each candidate
// span's arrays are copied into shared memory in one pass (StageArrays: every thread issues
// kStageInFlight loads before it stores any), once for the token scores (K) and once for the
// rebuild (K and V together), and everything else reads shared or device memory.

constexpr int kZoomThreads = 256;
constexpr int kZoomWarps = kZoomThreads / 32;
constexpr int kZoomMaxRank = kMaxBasisRank;
// Shared staging: a rank-32 basis of head_dim 128 and 64 rows, or K and V of a rank-16 span.
constexpr int kZoomStage = 8192;  // floats
// Loads each thread has in flight while staging: 4096 floats (16 KB) a block a round trip.
constexpr int kStageInFlight = 16;

// Copies the arrays src[k] (n[k] floats each, host or device memory) into `buf` (kZoomStage
// floats of shared memory), in order, each one that still fits; at[k] is the copy, or src[k]
// itself for one that does not fit. Every thread calls it with the same arguments; the leading
// barrier lets the block finish with what buf held, the trailing one publishes the copies.
template <int kArrays>
__device__ void StageArrays(const float* const (&src)[kArrays], const int64_t (&n)[kArrays],
                            float* buf, const float* (&at)[kArrays]) {
  int64_t off[kArrays];
  int64_t used = 0;
#pragma unroll
  for (int k = 0; k < kArrays; ++k) {
    const bool fits = used + n[k] <= kZoomStage;
    off[k] = fits ? used : -1;
    at[k] = fits ? buf + used : src[k];
    if (fits) used += n[k];
  }
  __syncthreads();
  for (int64_t first = threadIdx.x; first < used; first += kZoomThreads * kStageInFlight) {
    float v[kStageInFlight];
#pragma unroll
    for (int u = 0; u < kStageInFlight; ++u) {
      const int64_t i = first + static_cast<int64_t>(u) * kZoomThreads;
      v[u] = 0.0f;
#pragma unroll
      for (int k = 0; k < kArrays; ++k) {
        if (off[k] >= 0 && i >= off[k] && i < off[k] + n[k]) v[u] = src[k][i - off[k]];
      }
    }
#pragma unroll
    for (int u = 0; u < kStageInFlight; ++u) {
      const int64_t i = first + static_cast<int64_t>(u) * kZoomThreads;
      if (i < used) buf[i] = v[u];
    }
  }
  __syncthreads();
}

// The largest of every thread's v (blockDim.x == kZoomThreads); every thread gets it. Two
// barriers: the warps' maxima by shuffles, then each thread reads the kZoomWarps of them.
__device__ unsigned long long BlockMaxU64(unsigned long long v, unsigned long long* red) {
  for (int lanes = 16; lanes > 0; lanes >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, lanes);
    if (other > v) v = other;
  }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kZoomWarps; ++w) v = red[w] > v ? red[w] : v;
  __syncthreads();
  return v;
}

__device__ __forceinline__ int WarpSumInt(int v) {
  for (int lanes = 16; lanes > 0; lanes >>= 1) v += __shfl_xor_sync(0xffffffffu, v, lanes);
  return v;
}

using ZoomScan = cub::BlockScan<int, kZoomThreads>;

// out[c] = Σ_{c' < c} in[c'] for c < n, and the same into also[c] where also is not null; the
// total is returned to every thread. Each c belongs to one thread, so in may be also.
__device__ int BlockExclusiveScan(const int* in, int n, int* out, int* also,
                                  ZoomScan::TempStorage& scan, int* carry) {
  int running = 0;
  for (int first = 0; first < n; first += kZoomThreads) {
    const int c = first + static_cast<int>(threadIdx.x);
    const int x = c < n ? in[c] : 0;
    int inclusive = 0;
    ZoomScan(scan).InclusiveSum(x, inclusive);
    if (c < n) {
      out[c] = running + inclusive - x;
      if (also != nullptr) also[c] = running + inclusive - x;
    }
    if (threadIdx.x == kZoomThreads - 1) *carry = inclusive;
    __syncthreads();
    running += *carry;
    __syncthreads();  // scan and carry are reused
  }
  return running;
}

// A thread's kZoomTop largest span keys (below some bound), in descending order; 0 marks an
// empty place. Fixed indices only, so it stays in registers.
constexpr int kZoomTop = 4;
struct TopKeys {
  unsigned long long key[kZoomTop];
  bool more;  // the last look filled every place: keys below the last may remain
  __device__ void Clear() {
#pragma unroll
    for (int i = 0; i < kZoomTop; ++i) key[i] = 0;
    more = false;
  }
  // Keeps the kZoomTop largest of what it holds and k: k goes down the list, each place
  // keeping the larger of the two and passing the smaller on.
  __device__ void Offer(unsigned long long k) {
#pragma unroll
    for (int i = 0; i < kZoomTop; ++i) {
      const unsigned long long held = key[i];
      key[i] = k > held ? k : held;
      k = k > held ? held : k;
    }
  }
  __device__ void Pop() {
#pragma unroll
    for (int i = 0; i + 1 < kZoomTop; ++i) key[i] = key[i + 1];
    key[kZoomTop - 1] = 0;
  }
};

// The walk order of candidate spans: descending alpha, then ascending index, as one key (alpha
// is a gate value in [0, 1], whose bits order as the floats do); 0 is "none".
__device__ __forceinline__ unsigned long long SpanKey(float a, int s) {
  return (static_cast<unsigned long long>(__float_as_uint(a)) << 32) |
         (0xffffffffull - static_cast<unsigned>(s));
}

// KV head g's spans: their gates, tokens left and bases, and the step's threshold.
struct ZoomHead {
  int g, ns, group;
  int64_t row0;        // g * ns: the head's first entry of the [KV head][span] arrays
  const float* al;     // gate value per span
  const int32_t* rem;  // tokens left per span
  float t;             // tau
  const SpanBasisRef* bases;
  const uint8_t* pinned;

  __device__ __forceinline__ bool Eligible(int s) const {
    return al[s] > t && al[s] >= 0.0f && rem[s] > 0;
  }
  __device__ __forceinline__ bool Unpinned(const SpanBasisRef& ref, int i) const {
    return pinned == nullptr || ref.pinned < 0 || !pinned[ref.pinned + i];
  }
  __device__ __forceinline__ SpanBasisRef Basis(int s) const { return bases[row0 + s]; }
};

// The head's scratch in the workspace: kSekvZoomArrays arrays of `pad` (SekvZoomPad) entries.
struct ZoomScratch {
  int pad;
  int* cand;   // candidate spans, the walk's order
  int* start;  // first token slot of each candidate; later its kept rows' end
  int* kept;   // tokens of each candidate, then slot cursors, then kept rows
  float* w;    // token weight; later the kept rows
  int* tc;     // token's candidate
  int* to;     // token's offset in its span
  int* perm;   // tokens, heaviest first when sorted
};

__device__ __forceinline__ ZoomScratch ZoomScratchOf(int32_t* workspace, int64_t per_head, int g) {
  ZoomScratch z;
  z.pad = static_cast<int>(per_head / kSekvZoomArrays);
  z.cand = workspace + g * per_head;
  z.start = z.cand + z.pad;
  z.kept = z.start + z.pad;
  z.w = reinterpret_cast<float*>(z.kept + z.pad);
  z.tc = reinterpret_cast<int*>(z.w + z.pad);
  z.to = z.tc + z.pad;
  z.perm = z.to + z.pad;
  return z;
}

// A look through the thread's spans again: the kZoomTop largest keys below `below`.
__device__ __forceinline__ void LookBelow(const ZoomHead& head, unsigned long long below,
                                          TopKeys& mine) {
  mine.Clear();
  for (int s = threadIdx.x; s < head.ns; s += kZoomThreads) {
    if (!head.Eligible(s)) continue;
    const unsigned long long k = SpanKey(head.al[s], s);
    if (k < below) mine.Offer(k);
  }
  mine.more = mine.key[kZoomTop - 1] != 0;
}

// 1. Candidate spans (SelectSpans) into cand, their count returned: the walk ends once the
// budget left (cb) is below the shortest eligible span, since then nothing else fits. Each
// thread keeps the kZoomTop largest keys of its own spans below the last one taken, and only the
// thread whose key was taken moves on to its next (keys are distinct), looking through its
// spans again only once it has taken all kZoomTop; so a step of the walk is one block-wide
// maximum. Every thread of the block must call it (BlockMaxU64).
__device__ __forceinline__ int SelectCandidates(const ZoomHead& head, int cb, const ZoomScratch& z,
                                                unsigned long long* red_s) {
  const int tid = threadIdx.x;
  TopKeys mine;
  mine.Clear();
  unsigned long long short_key = 0;
  for (int s = tid; s < head.ns; s += kZoomThreads) {
    if (!head.Eligible(s)) continue;
    const unsigned long long k = 0xffffffffull - static_cast<unsigned>(head.rem[s]);
    if (k > short_key) short_key = k;
    mine.Offer(SpanKey(head.al[s], s));
  }
  mine.more = mine.key[kZoomTop - 1] != 0;
  short_key = BlockMaxU64(short_key, red_s);
  const long long shortest =
      short_key == 0 ? -1 : static_cast<long long>(0xffffffffull - short_key);
  int nc = 0, used = 0;
  while (shortest >= 0 && cb - used >= shortest && nc < z.pad) {
    const unsigned long long best = BlockMaxU64(mine.key[0], red_s);
    if (best == 0) break;
    if (mine.key[0] == best) {
      mine.Pop();
      if (mine.key[0] == 0 && mine.more) LookBelow(head, best, mine);
    }
    const int s = static_cast<int>(0xffffffffull - (best & 0xffffffffull));
    if (used + head.rem[s] <= cb) {
      used += head.rem[s];
      if (tid == 0) z.cand[nc] = s;
      ++nc;
    }
  }
  return nc;
}

// 2. The candidates' tokens not pinned, each candidate's slots contiguous: counted a warp a
// candidate, their offsets by a block-wide scan, then listed (in any order within a candidate:
// step 3 sorts them by a total order); their count returned, kept zeroed. Every thread of the
// block must call it, with cand published.
__device__ __forceinline__ int ListTokens(const ZoomHead& head, int nc, const ZoomScratch& z,
                                          ZoomScan::TempStorage& scan_s, int* carry_s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int c = warp; c < nc; c += kZoomWarps) {
    const SpanBasisRef ref = head.Basis(z.cand[c]);
    int count = 0;
    for (int i = lane; i < ref.length; i += 32) count += head.Unpinned(ref, i) ? 1 : 0;
    count = WarpSumInt(count);
    if (lane == 0) z.kept[c] = count;
  }
  __syncthreads();
  const int n_tok = min(BlockExclusiveScan(z.kept, nc, z.start, z.kept, scan_s, carry_s), z.pad);
  for (int c = warp; c < nc; c += kZoomWarps) {
    const SpanBasisRef ref = head.Basis(z.cand[c]);
    for (int i = lane; i < ref.length; i += 32) {
      if (!head.Unpinned(ref, i)) continue;
      const int slot = atomicAdd(&z.kept[c], 1);
      if (slot < z.pad) {
        z.tc[slot] = c;
        z.to[slot] = i;
        z.w[slot] = 0.0f;
      }
    }
  }
  __syncthreads();
  for (int c = tid; c < nc; c += kZoomThreads) z.kept[c] = 0;
  return n_tok;
}

// The weights of candidate c's tokens, slots [begin, end), in the low-rank coordinates:
// y_h = V_rᵀ q_h (a warp a (head, rank) pair, its lanes across head_dim), then
// <q_h, k_t> = us_t · y_h; the key basis staged first, one pass over the bus. Every thread of
// the block must call it (StageArrays); the next StageArrays' leading barrier orders its reads
// of y_s before y_s is rewritten.
__device__ __forceinline__ void WeighCandidate(const ZoomHead& head, const SpanBasisRef& ref,
                                               int begin, int end, const float* q, const float* lse,
                                               int hd, float scale, const ZoomScratch& z,
                                               float* y_s, float* stage_s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = head.g, group = head.group;
  const int r = min(ref.rank_k, kZoomMaxRank);
  const float* at[2];
  StageArrays<2>(
      {ref.vt_k, ref.us_k},
      {static_cast<int64_t>(ref.rank_k) * hd, static_cast<int64_t>(ref.length) * ref.rank_k},
      stage_s, at);
  for (int idx = warp; idx < group * r; idx += kZoomWarps) {
    const int h = idx / r, j = idx - h * r;
    const float* v = at[0] + static_cast<int64_t>(j) * hd;
    const float* qh = q + static_cast<int64_t>(g * group + h) * hd;
    float zsum = 0.0f;
    for (int col = lane; col < hd; col += 32) zsum += v[col] * qh[col];
    zsum = internal::WarpSum(zsum);
    if (lane == 0) y_s[h * r + j] = zsum;
  }
  __syncthreads();
  for (int slot = begin + tid; slot < end; slot += kZoomThreads) {
    const float* u = at[1] + static_cast<int64_t>(z.to[slot]) * ref.rank_k;
    double w = 0.0;
    for (int h = 0; h < group; ++h) {
      float dot = 0.0f;
      for (int j = 0; j < r; ++j) dot += u[j] * y_s[h * r + j];
      w += exp(static_cast<double>(dot * scale - lse[g * group + h]));
    }
    z.w[slot] = static_cast<float>(w);
  }
}

// The order of step 3: tokens past n_tok (padding) last; by token, heaviest first with ties to
// the lower span, then offset; by span, the walk's order, then offset.
__device__ __forceinline__ bool TokenBefore(int a, int b, int n_tok, bool by_token,
                                            const ZoomScratch& z) {
  if (a >= n_tok) return false;
  if (b >= n_tok) return true;
  if (by_token) {
    if (z.w[a] != z.w[b]) return z.w[a] > z.w[b];
    const int sa = z.cand[z.tc[a]], sb = z.cand[z.tc[b]];
    if (sa != sb) return sa < sb;
  } else if (z.tc[a] != z.tc[b]) {
    return z.tc[a] < z.tc[b];
  }
  return z.to[a] < z.to[b];
}

// 3. The tokens in TokenBefore's order: a bitonic sort of a permutation (perm) over the next
// power of two. Every thread of the block must call it (barriers).
__device__ __forceinline__ void SortTokens(int n_tok, bool by_token, const ZoomScratch& z) {
  const int tid = threadIdx.x;
  int size = 1;
  while (size < n_tok) size <<= 1;
  __syncthreads();
  for (int i = tid; i < size; i += kZoomThreads) z.perm[i] = i;
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < size; i += kZoomThreads) {
        const int ixj = i ^ j;
        if (ixj <= i) continue;
        const int a = z.perm[i], b = z.perm[ixj];
        const bool ascending = (i & k) == 0;
        if (ascending ? TokenBefore(b, a, n_tok, by_token, z)
                      : TokenBefore(a, b, n_tok, by_token, z)) {
          z.perm[i] = b;
          z.perm[ixj] = a;
        }
      }
      __syncthreads();
    }
  }
}

// The first `kept` tokens' rows grouped by candidate: rows[start[c] − kept[c], start[c]) are
// the places (in the weight order) of candidate c's kept rows. The weights are done with, so
// rows is their array, and start (done with since the scores) is the cursor. Every thread of
// the block must call it (barriers, scan).
__device__ __forceinline__ int* GroupKeptRows(int kept, int nc, const ZoomScratch& z,
                                              ZoomScan::TempStorage& scan_s, int* carry_s) {
  const int tid = threadIdx.x;
  for (int i = tid; i < kept; i += kZoomThreads) atomicAdd(&z.kept[z.tc[z.perm[i]]], 1);
  __syncthreads();
  BlockExclusiveScan(z.kept, nc, z.start, nullptr, scan_s, carry_s);
  int* rows_s = reinterpret_cast<int*>(z.w);
  for (int i = tid; i < kept; i += kZoomThreads) {
    rows_s[atomicAdd(&z.start[z.tc[z.perm[i]]], 1)] = i;
  }
  __syncthreads();
  return rows_s;
}

// Where step 4 writes: row pos of KV head g's `budget` rows of out_k and out_v.
struct ZoomOut {
  void* k;
  void* v;
  KvType type;
  int64_t budget;
};

// 4. Candidate c's n_c kept rows of K and V (ReconstructRow's order of summation), rows
// rows_s[first, first + n_c): the span's K and V bases staged together in one pass, then its
// kept rows of both. Every thread of the block must call it (StageArrays).
__device__ __forceinline__ void RebuildSpanRows(const SpanBasisRef& ref, int first, int n_c,
                                                const int* rows_s, int g, int hd,
                                                const ZoomScratch& z, const ZoomOut& out,
                                                float* stage_s) {
  const float* at[4];
  StageArrays<4>({ref.vt_k, ref.vt_v, ref.us_k, ref.us_v},
                 {static_cast<int64_t>(ref.rank_k) * hd, static_cast<int64_t>(ref.rank_v) * hd,
                  static_cast<int64_t>(ref.length) * ref.rank_k,
                  static_cast<int64_t>(ref.length) * ref.rank_v},
                 stage_s, at);
  const int per_part = n_c * hd;
  for (int idx = threadIdx.x; idx < 2 * per_part; idx += kZoomThreads) {
    const int part = idx < per_part ? 0 : 1;
    const int rest = idx - part * per_part;
    const int k = rest / hd, col = rest - k * hd;
    const int pos = rows_s[first + k];
    const int r = part == 0 ? ref.rank_k : ref.rank_v;
    const float* vt = part == 0 ? at[0] : at[1];
    const float* u = (part == 0 ? at[2] : at[3]) + static_cast<int64_t>(z.to[z.perm[pos]]) * r;
    float acc = 0.0f;
    for (int j = 0; j < r; ++j) acc += u[j] * vt[static_cast<int64_t>(j) * hd + col];
    const int64_t out_at = (static_cast<int64_t>(g) * out.budget + pos) * hd + col;
    void* dst = part == 0 ? out.k : out.v;
    if (out.type == KvType::kBf16) {
      static_cast<Bf16*>(dst)[out_at] = internal::ToBf16(acc);
    } else {
      static_cast<float*>(dst)[out_at] = acc;
    }
  }
}

// 5. The step's summary counts (SekvSummaryStep with the kept tokens as edits).
__device__ __forceinline__ void WriteSummaryCounts(const ZoomHead& head, const float* base_lc,
                                                   int nc, const ZoomScratch& z, float* step_lc,
                                                   uint8_t* step_skip) {
  const int tid = threadIdx.x;
  for (int s = tid; s < head.ns; s += kZoomThreads) {
    step_lc[head.row0 + s] = base_lc[head.row0 + s];
    step_skip[head.row0 + s] = head.rem[s] <= 0;
  }
  __syncthreads();
  for (int c = tid; c < nc; c += kZoomThreads) {
    if (z.kept[c] == 0) continue;
    const int s = z.cand[c];
    const int left = head.rem[s] - z.kept[c];
    step_skip[head.row0 + s] = left <= 0;
    if (left > 0) step_lc[head.row0 + s] = logf(static_cast<float>(left));
  }
}

__global__ void __launch_bounds__(kZoomThreads)
    SekvZoomKernel(const float* __restrict__ q, const float* __restrict__ lse,
                   const float* __restrict__ alpha, const float* __restrict__ tau,
                   const int32_t* __restrict__ remaining, const float* __restrict__ base_lc,
                   const SpanBasisRef* __restrict__ bases, const uint8_t* __restrict__ pinned,
                   int ns, int num_heads, int num_kv_heads, int hd, float scale, ZoomParams p,
                   void* out_k, void* out_v, KvType out_type, AttentionSegment* expansion,
                   int expansion_stride, float* __restrict__ step_lc,
                   uint8_t* __restrict__ step_skip, int64_t* __restrict__ stats,
                   int32_t* __restrict__ workspace, int64_t workspace_per_head) {
  __shared__ unsigned long long red_s[kZoomWarps];
  __shared__ float y_s[kMaxGroup * kZoomMaxRank];
  __shared__ float stage_s[kZoomStage];
  __shared__ ZoomScan::TempStorage scan_s;
  __shared__ int carry_s;
  const int g = blockIdx.x;
  const int64_t row0 = static_cast<int64_t>(g) * ns;
  const ZoomHead head{
      g, ns, num_heads / num_kv_heads, row0, alpha + row0, remaining + row0, tau[g], bases, pinned};
  // The head's scratch (SekvZoomPad entries per array): candidates and tokens.
  const ZoomScratch z = ZoomScratchOf(workspace, workspace_per_head, g);

  const int nc = SelectCandidates(head, p.candidate_budget, z, red_s);
  __syncthreads();
  const int n_tok = ListTokens(head, nc, z, scan_s, &carry_s);
  if (p.by_token) {
    for (int c = 0; c < nc; ++c) {
      const int begin = min(z.start[c], n_tok);
      const int end = c + 1 < nc ? min(z.start[c + 1], n_tok) : n_tok;
      if (begin == end) continue;
      WeighCandidate(head, head.Basis(z.cand[c]), begin, end, q, lse, hd, scale, z, y_s, stage_s);
    }
  }
  SortTokens(n_tok, p.by_token, z);
  const int kept = min(n_tok, p.budget);
  const int* rows_s = GroupKeptRows(kept, nc, z, scan_s, &carry_s);
  const ZoomOut out{out_k, out_v, out_type, p.budget};
  int spans = 0;
  for (int c = 0; c < nc; ++c) {
    const int n_c = z.kept[c];
    if (n_c == 0) continue;
    ++spans;
    RebuildSpanRows(head.Basis(z.cand[c]), z.start[c] - n_c, n_c, rows_s, g, hd, z, out, stage_s);
  }
  WriteSummaryCounts(head, base_lc, nc, z, step_lc, step_skip);
  if (threadIdx.x == 0) {
    expansion[static_cast<int64_t>(g) * expansion_stride].rows = kept;
    int64_t* st = stats + static_cast<int64_t>(g) * 4;
    st[0] += 1;
    st[1] += spans;
    st[2] += kept;
    st[3] += p.by_token ? n_tok : 0;
  }
}

}  // namespace

absl::Status SekvRouteGate(const float* q, const float* p_q, const float* p_k, int route_dim,
                           const void* summary_k, KvType summary_type, int64_t summary_stride,
                           const float* log_count, const int32_t* remaining,
                           const RouterGateParams* gates, const float* lse, int num_spans,
                           int num_heads, int num_kv_heads, int head_dim, float* alpha,
                           StreamHandle stream) {
  if (num_spans <= 0 || num_heads <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::SekvShape("SekvRouteGate", num_heads, num_kv_heads, head_dim);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = launch_checks::RouteDim(route_dim); !s.ok()) return s;
  const int group = num_heads / num_kv_heads;
  const size_t smem = sizeof(float) * static_cast<size_t>(group) * (2 * head_dim + route_dim);
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  const dim3 grid(static_cast<unsigned>(CeilDiv(num_spans, kSpansPerBlock)), num_kv_heads);
  SekvRouteGateKernel<<<grid, kThreads, smem, AsStream(stream)>>>(
      q, p_q, p_k, route_dim, summary_k, summary_type, summary_stride, log_count, remaining, gates,
      lse, num_spans, num_heads, num_kv_heads, head_dim, scale, alpha);
  return LaunchStatus("SekvRouteGateKernel");
}

absl::Status SpanRebuildRows(const RebuildJob* jobs, int count, int head_dim, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::PositiveHeadDim("SpanRebuildRows", head_dim); !s.ok()) {
    return s;
  }
  const int threads = head_dim >= 128 ? 128 : 64;
  SpanRebuildKernel<<<count, threads, 0, AsStream(stream)>>>(jobs, head_dim);
  return LaunchStatus("SpanRebuildKernel");
}

absl::Status MergeAttention(const float* out_a, const float* lse_a, const float* out_b,
                            const float* lse_b, int num_heads, int head_dim, float* out,
                            StreamHandle stream) {
  if (num_heads <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::PositiveHeadDim("MergeAttention", head_dim); !s.ok()) {
    return s;
  }
  MergeAttentionKernel<<<num_heads, 128, 0, AsStream(stream)>>>(out_a, lse_a, out_b, lse_b,
                                                                head_dim, out);
  return LaunchStatus("MergeAttentionKernel");
}

absl::Status SekvSummaryStep(const float* base_lc, const int32_t* remaining, const int32_t* edits,
                             int num_edits, int total, float* step_lc, uint8_t* step_skip,
                             StreamHandle stream) {
  if (total <= 0) return absl::OkStatus();
  if (num_edits < 0) return absl::InvalidArgumentError("SekvSummaryStep: negative edit count");
  SummaryResetKernel<<<static_cast<unsigned>(CeilDiv(total, 256)), 256, 0, AsStream(stream)>>>(
      base_lc, remaining, total, step_lc, step_skip);
  if (absl::Status s = LaunchStatus("SummaryResetKernel"); !s.ok()) return s;
  if (num_edits == 0) return absl::OkStatus();
  SummaryEditKernel<<<static_cast<unsigned>(CeilDiv(num_edits, 256)), 256, 0, AsStream(stream)>>>(
      remaining, edits, num_edits, total, step_lc, step_skip);
  return LaunchStatus("SummaryEditKernel");
}

absl::Status SekvZoom(const float* q, const float* lse, const float* alpha, const float* tau,
                      const int32_t* remaining, const float* base_lc, const SpanBasisRef* bases,
                      const uint8_t* pinned, int num_spans, int num_heads, int num_kv_heads,
                      int head_dim, ZoomParams params, void* out_k, void* out_v, KvType out_type,
                      AttentionSegment* expansion, int expansion_stride, float* step_lc,
                      uint8_t* step_skip, int64_t* stats, void* workspace, int64_t workspace_bytes,
                      StreamHandle stream) {
  if (num_heads <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::SekvShape("SekvZoom", num_heads, num_kv_heads, head_dim);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          launch_checks::Zoom(num_spans, params, num_kv_heads, workspace, workspace_bytes);
      !s.ok()) {
    return s;
  }
  const int64_t need = SekvZoomWorkspaceBytes(num_kv_heads, params.candidate_budget);
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  SekvZoomKernel<<<num_kv_heads, kZoomThreads, 0, AsStream(stream)>>>(
      q, lse, alpha, tau, remaining, base_lc, bases, pinned, num_spans, num_heads, num_kv_heads,
      head_dim, scale, params, out_k, out_v, out_type, expansion, expansion_stride, step_lc,
      step_skip, stats, static_cast<int32_t*>(workspace),
      need / num_kv_heads / static_cast<int64_t>(sizeof(int32_t)));
  return LaunchStatus("SekvZoomKernel");
}

}  // namespace scd::cuda
