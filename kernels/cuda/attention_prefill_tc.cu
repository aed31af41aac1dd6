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
#include "kernels/cuda/attention_prefill_tile.cuh"
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

// The block's shared-memory regions, in Tile<HD>'s order.
struct TcShared {
  bf16 *q, *k, *v;
  float* s;
  bf16* p;
  float* o;
};

template <int HD>
__device__ __forceinline__ TcShared TcSharedAt(unsigned char* smem) {
  using T = Tile<HD>;
  TcShared sh;
  sh.q = reinterpret_cast<bf16*>(smem);
  sh.k = reinterpret_cast<bf16*>(smem + T::kQBytes);
  sh.v = reinterpret_cast<bf16*>(smem + T::kQBytes + T::kKvBytes);
  sh.s = reinterpret_cast<float*>(smem + T::kQBytes + 2 * T::kKvBytes);
  sh.p = reinterpret_cast<bf16*>(smem + T::kQBytes + 2 * T::kKvBytes + T::kSBytes);
  sh.o = reinterpret_cast<float*>(smem + T::kQBytes + 2 * T::kKvBytes + T::kSBytes + T::kPBytes);
  return sh;
}

// The block's queries of head h in BF16 (zeros past the last) and O = 0.
template <int HD>
__device__ __forceinline__ void LoadQueries(const float* q, int64_t q_stride, int h,
                                            const PrefillTile& tile, const TcShared& sh) {
  using T = Tile<HD>;
  for (int idx = threadIdx.x; idx < kBq * HD; idx += kThreads) {
    const int r = idx / HD, d = idx - r * HD;
    const float value = r < tile.rows ? q[(tile.t0 + r) * q_stride + h * HD + d] : 0.0f;
    sh.q[r * T::kQkvPitch + d] = __float2bfloat16_rn(value);
    sh.o[r * T::kOPitch + d] = 0.0f;
  }
}

// Keys [kt, kt + kBk) of K and V as stored, in 16-byte chunks (zeros from key_end on); `col` is
// the KV head's first element of a row.
template <int HD>
__device__ __forceinline__ void LoadKvTile(const Bf16* k, const Bf16* v, int kv_dim, int col,
                                           int kt, int key_end, const TcShared& sh) {
  using T = Tile<HD>;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per K/V row
  for (int idx = threadIdx.x; idx < kBk * kChunks; idx += kThreads) {
    const int j = idx / kChunks, c = (idx - j * kChunks) * 8;
    const int key = kt + j;
    uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
    if (key < key_end) {
      const int64_t off = static_cast<int64_t>(key) * kv_dim + col + c;
      kv = *reinterpret_cast<const uint4*>(k + off);
      vv = *reinterpret_cast<const uint4*>(v + off);
    }
    *reinterpret_cast<uint4*>(sh.k + j * T::kQkvPitch + c) = kv;
    *reinterpret_cast<uint4*>(sh.v + j * T::kQkvPitch + c) = vv;
  }
}

// S = Q K^T for this warp's 16 rows. Every lane of the warp must call it (WMMA).
template <int HD>
__device__ __forceinline__ void ScoreRows(int warp, const TcShared& sh) {
  using T = Tile<HD>;
  for (int nt = 0; nt < kBk / 16; ++nt) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
      wmma::load_matrix_sync(a, sh.q + warp * 16 * T::kQkvPitch + kk * 16, T::kQkvPitch);
      wmma::load_matrix_sync(b, sh.k + nt * 16 * T::kQkvPitch + kk * 16, T::kQkvPitch);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(sh.s + warp * 16 * T::kSPitch + nt * 16, acc, T::kSPitch,
                            wmma::mem_row_major);
  }
}

// Softmax state of one row, held by a lane pair: row `row`, columns/dims of half `half`.
struct PairRow {
  int row, half, pos;
  bool valid;
  float m, l;  // running max and normaliser
};

// The online softmax step of the pair's row over keys [kt, kt + kBk), each lane taking 32 of
// the 64 columns: P (BF16) into p, l summing the rounded P, the row's half of O rescaled. Every
// lane of the warp must call it (shuffles).
template <int HD>
__device__ __forceinline__ void SoftmaxPairRow(PairRow& st, int kt, int key_end, int window,
                                               float scale, const TcShared& sh) {
  using T = Tile<HD>;
  const float* srow = sh.s + st.row * T::kSPitch + st.half * 32;
  float vals[32];
  float mx = -INFINITY;
#pragma unroll
  for (int c = 0; c < 32; ++c) {
    const int key = kt + st.half * 32 + c;
    const bool keep =
        st.valid && key < key_end && key <= st.pos && (window <= 0 || key > st.pos - window);
    vals[c] = keep ? srow[c] * scale : -INFINITY;
    mx = fmaxf(mx, vals[c]);
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  const float m_new = fmaxf(st.m, mx);
  float alpha = 1.0f, sum = 0.0f;
  bf16* prow = sh.p + st.row * T::kPPitch + st.half * 32;
  if (m_new == -INFINITY) {
#pragma unroll
    for (int c = 0; c < 32; ++c) prow[c] = __float2bfloat16_rn(0.0f);
  } else {
    alpha = expf(st.m - m_new);
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const bf16 p = __float2bfloat16_rn(vals[c] == -INFINITY ? 0.0f : expf(vals[c] - m_new));
      prow[c] = p;
      sum += __bfloat162float(p);
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  st.l = st.l * alpha + sum;
  st.m = m_new;
  float* orow = sh.o + st.row * T::kOPitch + st.half * (HD / 2);
#pragma unroll 8
  for (int d = 0; d < HD / 2; ++d) orow[d] *= alpha;
}

// O += P V for this warp's 16 rows. Every lane of the warp must call it (WMMA).
template <int HD>
__device__ __forceinline__ void AccumulateRows(int warp, const TcShared& sh) {
  using T = Tile<HD>;
  for (int nt = 0; nt < HD / 16; ++nt) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    float* o_tile = sh.o + warp * 16 * T::kOPitch + nt * 16;
    wmma::load_matrix_sync(acc, o_tile, T::kOPitch, wmma::mem_row_major);
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
      wmma::load_matrix_sync(a, sh.p + warp * 16 * T::kPPitch + kk * 16, T::kPPitch);
      wmma::load_matrix_sync(b, sh.v + kk * 16 * T::kQkvPitch + nt * 16, T::kQkvPitch);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(o_tile, acc, T::kOPitch, wmma::mem_row_major);
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    PrefillAttentionTcKernel(const float* __restrict__ q, int64_t q_stride,
                             const Bf16* __restrict__ k, const Bf16* __restrict__ v,
                             float* __restrict__ out, int64_t out_stride, int tokens, int start,
                             int num_heads, int num_kv_heads, int window, float scale) {
  extern __shared__ __align__(128) unsigned char smem[];
  const TcShared sh = TcSharedAt<HD>(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y;
  const int g = h / (num_heads / num_kv_heads);
  const PrefillTile tile = PrefillTileAt(blockIdx.x * kBq, kBq, tokens, start, window);
  const int kv_dim = num_kv_heads * HD;

  LoadQueries<HD>(q, q_stride, h, tile, sh);
  PairRow st;
  st.row = warp * 16 + (lane >> 1);
  st.half = lane & 1;
  st.pos = tile.first_pos + st.row;
  st.valid = st.row < tile.rows;
  st.m = -INFINITY;
  st.l = 0.0f;
  for (int kt = tile.key_begin; kt < tile.key_end; kt += kBk) {
    __syncthreads();  // previous tile consumed (and Q/O initialised on the first pass)
    LoadKvTile<HD>(k, v, kv_dim, g * HD, kt, tile.key_end, sh);
    __syncthreads();
    ScoreRows<HD>(warp, sh);
    __syncwarp();
    SoftmaxPairRow<HD>(st, kt, tile.key_end, window, scale, sh);
    __syncwarp();
    AccumulateRows<HD>(warp, sh);
  }
  __syncthreads();
  if (st.valid) {
    const float inv = 1.0f / st.l;
    const float* orow = sh.o + st.row * Tile<HD>::kOPitch + st.half * (HD / 2);
    float* dst = out + (tile.t0 + st.row) * out_stride + h * HD + st.half * (HD / 2);
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
