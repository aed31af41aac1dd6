// SEKV decode-step kernels (see scd_sekv_ops.h); the mixed-resolution softmax itself,
// SekvAttention, is sekv_attention.cu.
//   SekvRouteGate: one block per (KV head, span tile). It forms q_route = P_kᵀ (P_q q) for the
//   group's query heads in shared memory (the twin's order of summation), then one warp per
//   span computes <q_route, k̄> and <q, k̄> for each head and the gate's maximum.
//   SpanRebuildRows: one block per job, threads across head_dim, the rank loop in the twin's
//   order.
#include <algorithm>
#include <cmath>

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

constexpr int kZoomThreads = 256;
constexpr int kZoomMaxRank = kMaxBasisRank;
// `n` floats at src (host or device memory) copied into buf[offset, offset + n) of shared
// memory by the whole block when they fit kZoomStage, else src itself. Block-uniform; the
// leading barrier lets the block finish with what buf held before.
constexpr int kZoomStage = 8192;  // floats: a rank-32 basis of head_dim 128 and 64 rows
__device__ const float* Stage(const float* src, int64_t n, float* buf, int64_t offset) {
  __syncthreads();
  if (offset + n > kZoomStage) return src;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) buf[offset + i] = src[i];
  __syncthreads();
  return buf + offset;
}

// The largest of every thread's v (blockDim.x == kZoomThreads); every thread gets it.
__device__ unsigned long long BlockMaxU64(unsigned long long v, unsigned long long* red) {
  const int tid = threadIdx.x;
  red[tid] = v;
  __syncthreads();
  for (int stride = kZoomThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride && red[tid + stride] > red[tid]) red[tid] = red[tid + stride];
    __syncthreads();
  }
  const unsigned long long result = red[0];
  __syncthreads();
  return result;
}

// The walk order of candidate spans: descending alpha, then ascending index, as one key (alpha
// is a gate value in [0, 1], whose bits order as the floats do); 0 is "none".
__device__ __forceinline__ unsigned long long SpanKey(float a, int s) {
  return (static_cast<unsigned long long>(__float_as_uint(a)) << 32) |
         (0xffffffffull - static_cast<unsigned>(s));
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
  __shared__ unsigned long long red[kZoomThreads];
  __shared__ float y_s[kMaxGroup * kZoomMaxRank];
  __shared__ float stage_s[kZoomStage];
  __shared__ int n_tok_s;
  const int tid = threadIdx.x, g = blockIdx.x;
  // The head's scratch (SekvZoomPad entries per array): candidates and tokens.
  const int pad = static_cast<int>(workspace_per_head / kSekvZoomArrays);
  int32_t* ws = workspace + g * workspace_per_head;
  int* cand_s = ws;                                     // candidate spans, the walk's order
  int* start_s = cand_s + pad;                          // first token slot of each candidate
  int* kept_s = start_s + pad;                          // tokens kept per candidate
  float* w_s = reinterpret_cast<float*>(kept_s + pad);  // token weight
  int* tc_s = reinterpret_cast<int*>(w_s + pad);        // token's candidate
  int* to_s = tc_s + pad;                               // token's offset in its span
  int* perm_s = to_s + pad;                             // tokens, heaviest first when sorted
  const int group = num_heads / num_kv_heads;
  const int64_t row0 = static_cast<int64_t>(g) * ns;
  const float* al = alpha + row0;
  const int32_t* rem = remaining + row0;
  const float t = tau[g];
  const int cb = p.candidate_budget;
  auto eligible = [&](int s) { return al[s] > t && al[s] >= 0.0f && rem[s] > 0; };

  // 1. Candidate spans (SelectSpans): the walk ends once the budget left is below the shortest
  // eligible span, since then nothing else fits.
  unsigned long long key = 0;
  for (int s = tid; s < ns; s += kZoomThreads) {
    if (eligible(s)) {
      const unsigned long long k = 0xffffffffull - static_cast<unsigned>(rem[s]);
      if (k > key) key = k;
    }
  }
  key = BlockMaxU64(key, red);
  const long long shortest = key == 0 ? -1 : static_cast<long long>(0xffffffffull - key);
  int nc = 0, used = 0;
  unsigned long long prev = ~0ull;
  while (shortest >= 0 && cb - used >= shortest && nc < pad) {
    unsigned long long best = 0;
    for (int s = tid; s < ns; s += kZoomThreads) {
      if (!eligible(s)) continue;
      const unsigned long long k = SpanKey(al[s], s);
      if (k < prev && k > best) best = k;
    }
    best = BlockMaxU64(best, red);
    if (best == 0) break;
    prev = best;
    const int s = static_cast<int>(0xffffffffull - (best & 0xffffffffull));
    if (used + rem[s] <= cb) {
      used += rem[s];
      if (tid == 0) cand_s[nc] = s;
      ++nc;
    }
  }
  for (int c = tid; c < nc; c += kZoomThreads) kept_s[c] = 0;
  if (tid == 0) n_tok_s = 0;
  __syncthreads();

  // 2. The candidates' tokens not pinned, candidate by candidate (each one's slots contiguous).
  for (int c = 0; c < nc; ++c) {
    const SpanBasisRef ref = bases[row0 + cand_s[c]];
    if (tid == 0) start_s[c] = n_tok_s;
    __syncthreads();
    for (int i = tid; i < ref.length; i += kZoomThreads) {
      if (pinned != nullptr && ref.pinned >= 0 && pinned[ref.pinned + i]) continue;
      const int slot = atomicAdd(&n_tok_s, 1);
      if (slot < pad) {
        tc_s[slot] = c;
        to_s[slot] = i;
        w_s[slot] = 0.0f;
      }
    }
    __syncthreads();
  }
  const int n_tok = min(n_tok_s, pad);
  if (p.by_token) {
    // Weights in the low-rank coordinates: y_h = V_rᵀ q_h, then <q_h, k_t> = us_t · y_h.
    for (int c = 0; c < nc; ++c) {
      const SpanBasisRef ref = bases[row0 + cand_s[c]];
      const int r = min(ref.rank_k, kZoomMaxRank);
      const int end = c + 1 < nc ? min(start_s[c + 1], n_tok) : n_tok;
      // The basis in shared memory first (the CPU tier is host memory, read once, coalesced).
      const float* vt = Stage(ref.vt_k, static_cast<int64_t>(ref.rank_k) * hd, stage_s, 0);
      const int64_t used = vt == stage_s ? static_cast<int64_t>(ref.rank_k) * hd : 0;
      const float* us =
          Stage(ref.us_k, static_cast<int64_t>(ref.length) * ref.rank_k, stage_s, used);
      for (int idx = tid; idx < group * r; idx += kZoomThreads) {
        const int h = idx / r, j = idx % r;
        const float* v = vt + static_cast<int64_t>(j) * hd;
        const float* qh = q + static_cast<int64_t>(g * group + h) * hd;
        float z = 0.0f;
        for (int col = 0; col < hd; ++col) z += v[col] * qh[col];
        y_s[h * r + j] = z;
      }
      __syncthreads();
      for (int slot = start_s[c] + tid; slot < end; slot += kZoomThreads) {
        const float* u = us + static_cast<int64_t>(to_s[slot]) * ref.rank_k;
        double w = 0.0;
        for (int h = 0; h < group; ++h) {
          float dot = 0.0f;
          for (int j = 0; j < r; ++j) dot += u[j] * y_s[h * r + j];
          w += exp(static_cast<double>(dot * scale - lse[g * group + h]));
        }
        w_s[slot] = static_cast<float>(w);
      }
      __syncthreads();
    }
  }

  // 3. Order the tokens (bitonic sort of a permutation; padding sorts last): by token, heaviest
  // first with ties to the lower span, then offset; by span, the walk's order.
  int size = 1;
  while (size < n_tok) size <<= 1;
  for (int i = tid; i < size; i += kZoomThreads) perm_s[i] = i;
  __syncthreads();
  auto before = [&](int a, int b) {
    if (a >= n_tok) return false;
    if (b >= n_tok) return true;
    if (p.by_token) {
      if (w_s[a] != w_s[b]) return w_s[a] > w_s[b];
      const int sa = cand_s[tc_s[a]], sb = cand_s[tc_s[b]];
      if (sa != sb) return sa < sb;
    } else if (tc_s[a] != tc_s[b]) {
      return tc_s[a] < tc_s[b];
    }
    return to_s[a] < to_s[b];
  };
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < size; i += kZoomThreads) {
        const int ixj = i ^ j;
        if (ixj <= i) continue;
        const int a = perm_s[i], b = perm_s[ixj];
        const bool ascending = (i & k) == 0;
        if (ascending ? before(b, a) : before(a, b)) {
          perm_s[i] = b;
          perm_s[ixj] = a;
        }
      }
      __syncthreads();
    }
  }
  const int kept = min(n_tok, p.budget);
  for (int i = tid; i < kept; i += kZoomThreads) atomicAdd(&kept_s[tc_s[perm_s[i]]], 1);
  __syncthreads();

  // 4. The kept rows, span by span (ReconstructRow's order of summation): K then V, each
  // basis staged in shared memory, then every kept row of the span.
  for (int c = 0; c < nc; ++c) {
    if (kept_s[c] == 0) continue;
    const SpanBasisRef ref = bases[row0 + cand_s[c]];
    for (int part = 0; part < 2; ++part) {
      const int r = part == 0 ? ref.rank_k : ref.rank_v;
      const float* vt =
          Stage(part == 0 ? ref.vt_k : ref.vt_v, static_cast<int64_t>(r) * hd, stage_s, 0);
      const float* us = part == 0 ? ref.us_k : ref.us_v;
      void* dst = part == 0 ? out_k : out_v;
      for (int idx = tid; idx < kept * hd; idx += kZoomThreads) {
        const int pos = idx / hd, col = idx % hd;
        const int slot = perm_s[pos];
        if (tc_s[slot] != c) continue;
        const float* u = us + static_cast<int64_t>(to_s[slot]) * r;
        float acc = 0.0f;
        for (int j = 0; j < r; ++j) acc += u[j] * vt[static_cast<int64_t>(j) * hd + col];
        const int64_t at = (static_cast<int64_t>(g) * p.budget + pos) * hd + col;
        if (out_type == KvType::kBf16) {
          static_cast<Bf16*>(dst)[at] = internal::ToBf16(acc);
        } else {
          static_cast<float*>(dst)[at] = acc;
        }
      }
    }
  }

  // 5. The step's summary counts (SekvSummaryStep with the kept tokens as edits).
  for (int s = tid; s < ns; s += kZoomThreads) {
    step_lc[row0 + s] = base_lc[row0 + s];
    step_skip[row0 + s] = rem[s] <= 0;
  }
  __syncthreads();
  for (int c = tid; c < nc; c += kZoomThreads) {
    if (kept_s[c] == 0) continue;
    const int s = cand_s[c];
    const int left = rem[s] - kept_s[c];
    step_skip[row0 + s] = left <= 0;
    if (left > 0) step_lc[row0 + s] = logf(static_cast<float>(left));
  }
  if (tid == 0) {
    int spans = 0;
    for (int c = 0; c < nc; ++c) spans += kept_s[c] > 0;
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
