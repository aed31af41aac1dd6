// Prefill attention on tensor cores (BF16 WMMA 16x16x16, F32 accumulate; sm_80+), head_dim
// 64 or 128. Same algorithm and masking as the generic path (attention_prefill.cu): flash-style
// tiles with the online softmax (FlashAttention-2's split of queries across warps: Dao, 2023,
// Sec. 3.3). A block of 4 warps owns 64 queries of one head; each warp owns 16 query rows and
// walks 64-key tiles:
//   S = Q K^T   (WMMA, Q and K in BF16, S in F32 shared memory)
//   online softmax on S in F32 (two lanes per row), P rounded to BF16
//   O = alpha * O + P V   (WMMA; O lives in F32 shared memory, so the per-row rescale is
//                          done on plain floats and never depends on fragment layouts)
// Numerics differ from the twin by the BF16 rounding of Q and P (the normaliser l sums the
// rounded P, so the weights stay normalised): ~1e-2 relative, see
// tests/gpu/parity/attention_test.cc.
#include <mma.h>

#include <cmath>

#include "kernels/cuda/attention_prefill_tc.h"
#include "kernels/cuda/device_common.cuh"

namespace scd::cuda::internal {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kBq = 64, kBk = 64, kThreads = 128;

template <int HD>
struct Tile {
  static constexpr int kQkvPitch = HD + 8;  // bf16 elements (16-byte row padding)
  static constexpr int kSPitch = kBk + 4;   // floats
  static constexpr int kPPitch = kBk + 8;   // bf16
  static constexpr int kOPitch = HD + 4;    // floats
  static constexpr size_t kQBytes = size_t{kBq} * kQkvPitch * sizeof(bf16);
  static constexpr size_t kKvBytes = size_t{kBk} * kQkvPitch * sizeof(bf16);
  static constexpr size_t kSBytes = size_t{kBq} * kSPitch * sizeof(float);
  static constexpr size_t kPBytes = size_t{kBq} * kPPitch * sizeof(bf16);
  static constexpr size_t kOBytes = size_t{kBq} * kOPitch * sizeof(float);
  static constexpr size_t kSmemBytes = kQBytes + 2 * kKvBytes + kSBytes + kPBytes + kOBytes;
  // WMMA needs 32-byte aligned tile pointers: every region size is a multiple of 128 bytes.
  static_assert(kQBytes % 128 == 0 && kKvBytes % 128 == 0 && kSBytes % 128 == 0 &&
                    kPBytes % 128 == 0 && kOBytes % 128 == 0,
                "shared-memory regions must keep 128-byte alignment");
};

template <int HD>
__global__ void __launch_bounds__(kThreads)
    PrefillAttentionTcKernel(const float* __restrict__ q, int64_t q_stride,
                             const Bf16* __restrict__ k, const Bf16* __restrict__ v,
                             float* __restrict__ out, int64_t out_stride, int tokens, int start,
                             int num_heads, int num_kv_heads, int window, float scale) {
  using T = Tile<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);
  bf16* k_s = reinterpret_cast<bf16*>(smem + T::kQBytes);
  bf16* v_s = reinterpret_cast<bf16*>(smem + T::kQBytes + T::kKvBytes);
  float* s_s = reinterpret_cast<float*>(smem + T::kQBytes + 2 * T::kKvBytes);
  bf16* p_s = reinterpret_cast<bf16*>(smem + T::kQBytes + 2 * T::kKvBytes + T::kSBytes);
  float* o_s =
      reinterpret_cast<float*>(smem + T::kQBytes + 2 * T::kKvBytes + T::kSBytes + T::kPBytes);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y;
  const int g = h / (num_heads / num_kv_heads);
  const int t0 = blockIdx.x * kBq;
  const int rows = min(kBq, tokens - t0);
  const int kv_dim = num_kv_heads * HD;
  const int first_pos = start + t0;
  const int key_end = first_pos + rows;
  const int key_begin = window > 0 ? max(0, first_pos - window + 1) : 0;

  for (int idx = tid; idx < kBq * HD; idx += kThreads) {
    const int r = idx / HD, d = idx - r * HD;
    const float value = r < rows ? q[(t0 + r) * q_stride + h * HD + d] : 0.0f;
    q_s[r * T::kQkvPitch + d] = __float2bfloat16_rn(value);
    o_s[r * T::kOPitch + d] = 0.0f;
  }

  // Softmax state of one row, held by a lane pair: row my_row, columns/dims of half my_half.
  const int my_row = warp * 16 + (lane >> 1);
  const int my_half = lane & 1;
  const int my_pos = first_pos + my_row;
  const bool row_valid = my_row < rows;
  float m = -INFINITY, l = 0.0f;

  constexpr int kChunks = HD / 8;  // 16-byte chunks per K/V row
  for (int kt = key_begin; kt < key_end; kt += kBk) {
    __syncthreads();  // previous tile consumed (and Q/O initialised on the first pass)
    for (int idx = tid; idx < kBk * kChunks; idx += kThreads) {
      const int j = idx / kChunks, c = (idx - j * kChunks) * 8;
      const int key = kt + j;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (key < key_end) {
        const int64_t off = static_cast<int64_t>(key) * kv_dim + g * HD + c;
        kv = *reinterpret_cast<const uint4*>(k + off);
        vv = *reinterpret_cast<const uint4*>(v + off);
      }
      *reinterpret_cast<uint4*>(k_s + j * T::kQkvPitch + c) = kv;
      *reinterpret_cast<uint4*>(v_s + j * T::kQkvPitch + c) = vv;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
    for (int nt = 0; nt < kBk / 16; ++nt) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
        wmma::load_matrix_sync(a, q_s + warp * 16 * T::kQkvPitch + kk * 16, T::kQkvPitch);
        wmma::load_matrix_sync(b, k_s + nt * 16 * T::kQkvPitch + kk * 16, T::kQkvPitch);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(s_s + warp * 16 * T::kSPitch + nt * 16, acc, T::kSPitch,
                              wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: each lane of the pair takes 32 of the 64 columns.
    {
      const float* srow = s_s + my_row * T::kSPitch + my_half * 32;
      float vals[32];
      float mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const int key = kt + my_half * 32 + c;
        const bool keep =
            row_valid && key < key_end && key <= my_pos && (window <= 0 || key > my_pos - window);
        vals[c] = keep ? srow[c] * scale : -INFINITY;
        mx = fmaxf(mx, vals[c]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_new = fmaxf(m, mx);
      float alpha = 1.0f, sum = 0.0f;
      bf16* prow = p_s + my_row * T::kPPitch + my_half * 32;
      if (m_new == -INFINITY) {
#pragma unroll
        for (int c = 0; c < 32; ++c) prow[c] = __float2bfloat16_rn(0.0f);
      } else {
        alpha = expf(m - m_new);
#pragma unroll
        for (int c = 0; c < 32; ++c) {
          const bf16 p = __float2bfloat16_rn(vals[c] == -INFINITY ? 0.0f : expf(vals[c] - m_new));
          prow[c] = p;
          sum += __bfloat162float(p);
        }
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      l = l * alpha + sum;
      m = m_new;
      float* orow = o_s + my_row * T::kOPitch + my_half * (HD / 2);
#pragma unroll 8
      for (int d = 0; d < HD / 2; ++d) orow[d] *= alpha;
    }
    __syncwarp();

    // O += P V for this warp's rows.
    for (int nt = 0; nt < HD / 16; ++nt) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      float* o_tile = o_s + warp * 16 * T::kOPitch + nt * 16;
      wmma::load_matrix_sync(acc, o_tile, T::kOPitch, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBk / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, p_s + warp * 16 * T::kPPitch + kk * 16, T::kPPitch);
        wmma::load_matrix_sync(b, v_s + kk * 16 * T::kQkvPitch + nt * 16, T::kQkvPitch);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_tile, acc, T::kOPitch, wmma::mem_row_major);
    }
  }
  __syncthreads();
  if (row_valid) {
    const float inv = 1.0f / l;
    const float* orow = o_s + my_row * T::kOPitch + my_half * (HD / 2);
    float* dst = out + (t0 + my_row) * out_stride + h * HD + my_half * (HD / 2);
    for (int d = 0; d < HD / 2; ++d) dst[d] = orow[d] * inv;
  }
}

template <int HD>
absl::Status Launch(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v, float* out,
                    int64_t out_stride, int tokens, int start, int num_heads, int num_kv_heads,
                    int window, StreamHandle stream) {
  constexpr size_t kSmem = Tile<HD>::kSmemBytes;
  SCD_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(PrefillAttentionTcKernel<HD>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(kSmem)));
  const dim3 grid(static_cast<unsigned>(CeilDiv(tokens, kBq)), num_heads);
  const float scale = 1.0f / sqrtf(static_cast<float>(HD));
  PrefillAttentionTcKernel<HD><<<grid, kThreads, kSmem, AsStream(stream)>>>(
      q, q_stride, k, v, out, out_stride, tokens, start, num_heads, num_kv_heads, window, scale);
  return LaunchStatus("PrefillAttentionTcKernel");
}

}  // namespace

absl::Status PrefillAttentionTensorCore(const float* q, int64_t q_stride, const Bf16* k,
                                        const Bf16* v, float* out, int64_t out_stride, int tokens,
                                        int start, int num_heads, int num_kv_heads, int head_dim,
                                        int window, StreamHandle stream) {
  return WithTensorCoreHeadDim(head_dim, "tensor-core attention", [&](auto hd) {
    return Launch<decltype(hd)::value>(q, q_stride, k, v, out, out_stride, tokens, start, num_heads,
                                       num_kv_heads, window, stream);
  });
}

}  // namespace scd::cuda::internal
