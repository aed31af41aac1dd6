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
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;

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

__global__ void __launch_bounds__(kThreads)
    PrefillAttentionKernel(const float* __restrict__ q, int64_t q_stride,
                           const Bf16* __restrict__ k, const Bf16* __restrict__ v,
                           float* __restrict__ out, int64_t out_stride, int tokens, int start,
                           int num_heads, int num_kv_heads, int hd, int window, float scale) {
  extern __shared__ float smem[];
  float* q_s = smem;
  float* k_s = q_s + kBq * hd;
  float* v_s = k_s + kBk * (hd + 1);
  float* s_s = v_s + kBk * hd;
  float* o_s = s_s + kBq * kBk;
  float* m_s = o_s + kBq * hd;
  float* l_s = m_s + kBq;
  float* alpha_s = l_s + kBq;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y;
  const int g = h / (num_heads / num_kv_heads);
  const int t0 = blockIdx.x * kBq;
  const int rows = min(kBq, tokens - t0);
  const int kv_dim = num_kv_heads * hd;
  const int first_pos = start + t0;
  const int key_end = first_pos + rows;  // exclusive
  const int key_begin = window > 0 ? max(0, first_pos - window + 1) : 0;

  for (int idx = tid; idx < kBq * hd; idx += kThreads) {
    const int r = idx / hd, d = idx - r * hd;
    q_s[idx] = r < rows ? q[(t0 + r) * q_stride + h * hd + d] : 0.0f;
    o_s[idx] = 0.0f;
  }
  if (tid < kBq) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }

  for (int kt = key_begin; kt < key_end; kt += kBk) {
    __syncthreads();  // previous tile fully consumed; q/o/m/l initialised
    for (int idx = tid; idx < kBk * hd; idx += kThreads) {
      const int j = idx / hd, d = idx - j * hd;
      const int key = kt + j;
      float kv = 0.0f, vv = 0.0f;
      if (key < key_end) {
        const int64_t off = static_cast<int64_t>(key) * kv_dim + g * hd + d;
        kv = internal::LoadBf16(k + off);
        vv = internal::LoadBf16(v + off);
      }
      k_s[j * (hd + 1) + d] = kv;
      v_s[j * hd + d] = vv;
    }
    __syncthreads();

    // Scores with the causal / sliding-window mask.
    for (int e = tid; e < kBq * kBk; e += kThreads) {
      const int r = e / kBk, j = e - r * kBk;
      const int key = kt + j, pos = first_pos + r;
      float s = -INFINITY;
      if (r < rows && key <= pos && (window <= 0 || key > pos - window)) {
        float dot = 0.0f;
        const float* qr = q_s + r * hd;
        const float* kr = k_s + j * (hd + 1);
        for (int d = 0; d < hd; ++d) dot += qr[d] * kr[d];
        s = dot * scale;
      }
      s_s[e] = s;
    }
    __syncthreads();

    // Online softmax update, one warp per row, one key per lane.
    for (int r = warp; r < kBq; r += kWarps) {
      const float s = s_s[r * kBk + lane];
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, internal::WarpMax(s));
      float p = 0.0f, alpha = 1.0f;
      if (m_new != -INFINITY) {
        p = s == -INFINITY ? 0.0f : expf(s - m_new);
        alpha = expf(m_old - m_new);  // 0 when m_old is -inf
      }
      s_s[r * kBk + lane] = p;
      const float sum = internal::WarpSum(p);
      // Every lane has read m_s[r] and l_s[r] before lane 0 overwrites them: the shuffles above
      // do not order shared-memory accesses (compute-sanitizer's racecheck flags it otherwise).
      __syncwarp();
      if (lane == 0) {
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
        alpha_s[r] = alpha;
      }
    }
    __syncthreads();

    for (int idx = tid; idx < kBq * hd; idx += kThreads) {
      const int r = idx / hd, d = idx - r * hd;
      const float* pr = s_s + r * kBk;
      float acc = 0.0f;
#pragma unroll 8
      for (int j = 0; j < kBk; ++j) acc += pr[j] * v_s[j * hd + d];
      o_s[idx] = o_s[idx] * alpha_s[r] + acc;
    }
  }
  __syncthreads();
  for (int idx = tid; idx < rows * hd; idx += kThreads) {
    const int r = idx / hd, d = idx - r * hd;
    out[(t0 + r) * out_stride + h * hd + d] = o_s[idx] / l_s[r];
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
