// Prefill attention, generic path (F32 on CUDA cores, any head_dim <= 256), and the dispatch
// between it and the tensor-core path (attention_prefill_tc.cu). See ops.h for the contract.
//
// Flash-style tiling with the online softmax of Milakov & Gimelshein (2018), as in
// FlashAttention (Dao et al., 2022, Alg. 1): a block owns kBq queries of one head and walks the
// causal key range in tiles of kBk keys. Per query row it keeps the running max m, the running
// normaliser l and the unnormalised output o; a new tile with scores s updates
//   m' = max(m, max_j s_j),  alpha = exp(m - m'),  p_j = exp(s_j - m'),
//   l' = alpha * l + sum_j p_j,  o' = alpha * o + sum_j p_j v_j,
// and the result is o / l. The score matrix is never materialised, so memory is O(T * d).
// GQA: query head h reads KV head h / (num_heads / num_kv_heads). Masking keeps key k for the
// query at position p iff k <= p and (window <= 0 or k > p - window), as the CPU twin does.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_prefill_tc.h"
#include "kernels/cuda/attention_prefill_tile.cuh"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;
using internal::PrefillTile;
using internal::PrefillTileAt;

constexpr int kBq = 16;  // queries per block
constexpr int kBk = 32;  // keys per tile (one per lane in the softmax step)
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

// Shared memory (floats): q[kBq][hd], k[kBk][hd + 1] (padded: lanes read different keys),
// v[kBk][hd], s[kBq][kBk], o[kBq][hd], m/l/alpha[kBq].
size_t GenericSmemBytes(int hd) {
  const size_t floats = static_cast<size_t>(kBq) * hd + static_cast<size_t>(kBk) * (hd + 1) +
                        static_cast<size_t>(kBk) * hd + kBq * kBk + static_cast<size_t>(kBq) * hd +
                        3 * kBq;
  return floats * sizeof(float);
}

// The block's shared memory, laid out as GenericSmemBytes says.
struct GenericShared {
  float *q, *k, *v, *s, *o, *m, *l, *alpha;
};

__device__ __forceinline__ GenericShared GenericSharedAt(float* smem, int hd) {
  GenericShared sh;
  sh.q = smem;
  sh.k = sh.q + kBq * hd;
  sh.v = sh.k + kBk * (hd + 1);
  sh.s = sh.v + kBk * hd;
  sh.o = sh.s + kBq * kBk;
  sh.m = sh.o + kBq * hd;
  sh.l = sh.m + kBq;
  sh.alpha = sh.l + kBq;
  return sh;
}

// The block's queries of head h (zeros past the last), o = 0, m = -inf, l = 0.
__device__ __forceinline__ void LoadQueries(const float* q, int64_t q_stride, int h, int hd,
                                            const PrefillTile& tile, const GenericShared& sh) {
  const int tid = threadIdx.x;
  for (int idx = tid; idx < kBq * hd; idx += kThreads) {
    const int r = idx / hd, d = idx - r * hd;
    sh.q[idx] = r < tile.rows ? q[(tile.t0 + r) * q_stride + h * hd + d] : 0.0f;
    sh.o[idx] = 0.0f;
  }
  if (tid < kBq) {
    sh.m[tid] = -INFINITY;
    sh.l[tid] = 0.0f;
  }
}

// Keys [kt, kt + kBk) of K and V widened to F32 (zeros from key_end on); `col` is the KV head's
// first element of a row.
__device__ __forceinline__ void LoadKvTile(const Bf16* k, const Bf16* v, int kv_dim, int col,
                                           int hd, int kt, int key_end, const GenericShared& sh) {
  for (int idx = threadIdx.x; idx < kBk * hd; idx += kThreads) {
    const int j = idx / hd, d = idx - j * hd;
    const int key = kt + j;
    float kv = 0.0f, vv = 0.0f;
    if (key < key_end) {
      const int64_t off = static_cast<int64_t>(key) * kv_dim + col + d;
      kv = internal::LoadBf16(k + off);
      vv = internal::LoadBf16(v + off);
    }
    sh.k[j * (hd + 1) + d] = kv;
    sh.v[j * hd + d] = vv;
  }
}

// Scores of the tile's keys with the causal / sliding-window mask.
__device__ __forceinline__ void ScoreTile(const PrefillTile& tile, int kt, int hd, int window,
                                          float scale, const GenericShared& sh) {
  for (int e = threadIdx.x; e < kBq * kBk; e += kThreads) {
    const int r = e / kBk, j = e - r * kBk;
    const int key = kt + j, pos = tile.first_pos + r;
    float s = -INFINITY;
    if (r < tile.rows && key <= pos && (window <= 0 || key > pos - window)) {
      float dot = 0.0f;
      const float* qr = sh.q + r * hd;
      const float* kr = sh.k + j * (hd + 1);
      for (int d = 0; d < hd; ++d) dot += qr[d] * kr[d];
      s = dot * scale;
    }
    sh.s[e] = s;
  }
}

// Online softmax update, one warp per row, one key per lane: the scores become p, m and l move
// on, alpha is the rescale of the row's o. Every lane of a warp must call it (shuffles).
__device__ __forceinline__ void SoftmaxUpdate(const GenericShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int r = warp; r < kBq; r += kWarps) {
    const float s = sh.s[r * kBk + lane];
    const float m_old = sh.m[r];
    const float m_new = fmaxf(m_old, internal::WarpMax(s));
    float p = 0.0f, alpha = 1.0f;
    if (m_new != -INFINITY) {
      p = s == -INFINITY ? 0.0f : expf(s - m_new);
      alpha = expf(m_old - m_new);  // 0 when m_old is -inf
    }
    sh.s[r * kBk + lane] = p;
    const float sum = internal::WarpSum(p);
    // Every lane has read m[r] and l[r] before lane 0 overwrites them: the shuffles above do
    // not order shared-memory accesses (compute-sanitizer's racecheck flags it otherwise).
    __syncwarp();
    if (lane == 0) {
      sh.l[r] = sh.l[r] * alpha + sum;
      sh.m[r] = m_new;
      sh.alpha[r] = alpha;
    }
  }
}

// o = alpha o + P V for every (row, dim).
__device__ __forceinline__ void AccumulateTile(int hd, const GenericShared& sh) {
  for (int idx = threadIdx.x; idx < kBq * hd; idx += kThreads) {
    const int r = idx / hd, d = idx - r * hd;
    const float* pr = sh.s + r * kBk;
    float acc = 0.0f;
#pragma unroll 8
    for (int j = 0; j < kBk; ++j) acc += pr[j] * sh.v[j * hd + d];
    sh.o[idx] = sh.o[idx] * sh.alpha[r] + acc;
  }
}

__global__ void __launch_bounds__(kThreads)
    PrefillAttentionKernel(const float* __restrict__ q, int64_t q_stride,
                           const Bf16* __restrict__ k, const Bf16* __restrict__ v,
                           float* __restrict__ out, int64_t out_stride, int tokens, int start,
                           int num_heads, int num_kv_heads, int hd, int window, float scale) {
  extern __shared__ float smem[];
  const GenericShared sh = GenericSharedAt(smem, hd);
  const int h = blockIdx.y;
  const int g = h / (num_heads / num_kv_heads);
  const PrefillTile tile = PrefillTileAt(blockIdx.x * kBq, kBq, tokens, start, window);
  const int kv_dim = num_kv_heads * hd;

  LoadQueries(q, q_stride, h, hd, tile, sh);
  for (int kt = tile.key_begin; kt < tile.key_end; kt += kBk) {
    __syncthreads();  // previous tile fully consumed; q/o/m/l initialised
    LoadKvTile(k, v, kv_dim, g * hd, hd, kt, tile.key_end, sh);
    __syncthreads();
    ScoreTile(tile, kt, hd, window, scale, sh);
    __syncthreads();
    SoftmaxUpdate(sh);
    __syncthreads();
    AccumulateTile(hd, sh);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < tile.rows * hd; idx += kThreads) {
    const int r = idx / hd, d = idx - r * hd;
    out[(tile.t0 + r) * out_stride + h * hd + d] = sh.o[idx] / sh.l[r];
  }
}

absl::Status LaunchGeneric(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v,
                           float* out, int64_t out_stride, int tokens, int start, int num_heads,
                           int num_kv_heads, int head_dim, int window, StreamHandle stream) {
  const size_t smem = GenericSmemBytes(head_dim);
  if (smem > 48 * 1024) {
    SCD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(PrefillAttentionKernel,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(smem)));
  }
  const dim3 grid(static_cast<unsigned>(internal::CeilDiv(tokens, kBq)), num_heads);
  const float scale = 1.0f / sqrtf(static_cast<float>(head_dim));
  PrefillAttentionKernel<<<grid, kThreads, smem, AsStream(stream)>>>(
      q, q_stride, k, v, out, out_stride, tokens, start, num_heads, num_kv_heads, head_dim, window,
      scale);
  return LaunchStatus("PrefillAttentionKernel");
}

}  // namespace

bool AttentionImplSupports(AttentionImpl impl, int head_dim) {
  return launch_checks::PrefillSupports(impl, head_dim);
}

absl::Status PrefillAttention(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v,
                              float* out, int64_t out_stride, int tokens, int start, int num_heads,
                              int num_kv_heads, int head_dim, int window, AttentionImpl impl,
                              StreamHandle stream) {
  if (tokens <= 0) return absl::OkStatus();
  const absl::StatusOr<bool> tensor_cores =
      launch_checks::PrefillTensorCores(k, v, num_heads, num_kv_heads, head_dim, impl);
  if (!tensor_cores.ok()) return tensor_cores.status();
  if (*tensor_cores && impl == AttentionImpl::kTensorCoreMma) {
    return internal::PrefillAttentionMma(q, q_stride, k, v, out, out_stride, tokens, start,
                                         num_heads, num_kv_heads, head_dim, window, stream);
  }
  if (*tensor_cores) {
    return internal::PrefillAttentionTensorCore(q, q_stride, k, v, out, out_stride, tokens, start,
                                                num_heads, num_kv_heads, head_dim, window, stream);
  }
  return LaunchGeneric(q, q_stride, k, v, out, out_stride, tokens, start, num_heads, num_kv_heads,
                       head_dim, window, stream);
}

}  // namespace scd::cuda
