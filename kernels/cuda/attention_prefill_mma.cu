// Prefill attention on tensor cores through mma.sync (BF16 m16n8k16, F32 accumulate; sm_80+),
// head_dim 64 or 128: AttentionImpl::kTensorCoreMma. Same algorithm and masking as the other
// paths (attention_prefill.cu, attention_prefill_tc.cu), but laid out as FlashAttention-2 does
// (Dao, 2023, Sec. 3.3) with every intermediate in registers, where the WMMA kernel
// (attention_prefill_tc.cu, kAuto's choice) passes S, P and O through shared memory. Not yet
// run on a GPU: kAuto switches to it once a device run has shown its parity and its speed
// (docs/GPU.md).
// A block of 4 warps owns 64 queries of one head, each warp 16 query rows, and the block walks
// 64-key tiles that it stages in shared memory (K as stored, V transposed):
//   S = Q K^T   Q's A fragments are loaded once; S accumulates in C fragments;
//   softmax     on the C fragments: a row's 64 scores lie in the 4 lanes of a quad, so the row
//               max and sum take two shuffles; exp2 of scores pre-scaled by log2(e) / sqrt(d);
//   O = alpha O + P V   P's C fragments are, rounded to BF16, exactly the A fragments of the
//               next product, so P never leaves the registers; O (16 x head_dim per warp)
//               lives in C fragments and is rescaled in place.
// The fragment layouts are PTX's (ISA, "Matrix fragments for mma.m16n8k16"): with g = lane / 4
// and t = lane % 4, a lane holds A rows g and g + 8 at columns 2t, 2t + 1 (+8), B column g at
// rows 2t, 2t + 1 (+8), and C rows g and g + 8 at columns 2t, 2t + 1. Mma() below models the
// instruction lane by lane where the GPU emulator compiles this file (no __CUDA_ARCH__): the
// emulator checks the kernel's logic against that model, and only a device checks the model.
// Blocks are issued heaviest first (the last query tiles see the most keys under the causal
// mask), so that the short ones fill the tail.
// Numerics differ from the twin by the BF16 rounding of Q and P (the normaliser l sums P before
// rounding): ~1e-2 relative, see tests/gpu/parity/attention_test.cc.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention_prefill_tc.h"
#include "kernels/cuda/attention_prefill_tile.cuh"
#include "kernels/cuda/device_common.cuh"

namespace scd::cuda::internal {
namespace {

constexpr int kBq = 64, kBk = 64, kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

#if !defined(__CUDA_ARCH__) && defined(__SANITIZE_THREAD__)
// The emulator's race check: the model's own exchange below is ordered by its warp barriers and
// is not part of the kernel, so it is left uninstrumented (and out of the check's time).
#define SCD_MMA_MODEL_ATTRIBUTES __attribute__((no_sanitize("thread")))
#else
#define SCD_MMA_MODEL_ATTRIBUTES
#endif

// d[0..3] += a · b for one warp: A 16x16 and B 16x8 BF16 fragments, C 16x8 F32 (layouts above).
SCD_MMA_MODEL_ATTRIBUTES __device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4],
                                                             uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  // The emulator's model: every lane posts its fragments, then computes its own C elements
  // from the lanes that hold the rows and columns it needs.
  __shared__ uint32_t posted[32][32][6];  // [warp][lane][a0..a3, b0, b1]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = 0; i < 4; ++i) posted[warp][lane][i] = a[i];
  posted[warp][lane][4] = b0;
  posted[warp][lane][5] = b1;
  __syncwarp();
  const int g = lane >> 2, t = lane & 3;
  auto half = [](uint32_t v, int k) { return __uint_as_float(k & 1 ? v & 0xffff0000u : v << 16); };
  for (int k = 0; k < 16; ++k) {
    const int src = 4 * g + (k & 7) / 2;  // holds A rows g and g + 8 at columns k
    const float a_lo = half(posted[warp][src][k < 8 ? 0 : 2], k);
    const float a_hi = half(posted[warp][src][k < 8 ? 1 : 3], k);
    for (int e = 0; e < 2; ++e) {
      const int b_src = 4 * (2 * t + e) + (k & 7) / 2;  // holds B column 2t + e at row k
      const float b = half(posted[warp][b_src][k < 8 ? 4 : 5], k);
      d[e] += a_lo * b;
      d[2 + e] += a_hi * b;
    }
  }
  __syncwarp();
#endif
}

// Two floats as a BF16 pair, lo in the low half (the element with the lower column).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

__device__ __forceinline__ uint32_t Load32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The shared-memory tiles' shapes (BF16 elements) for head_dim HD.
template <int HD>
struct MmaTile {
  static constexpr int kKPitch = HD + 8;    // K tile [key][d]; 16-byte rows, conflict-free reads
  static constexpr int kVPitch = kBk + 8;   // V tile transposed [d][key]
  static constexpr int kChunks = HD / 8;    // 16-byte chunks per K/V row
  static constexpr int kDimTiles = HD / 8;  // O's C fragments per warp: 8 dims each
};

// This lane's place in the fragments (g = lane / 4, t = lane % 4), its two query rows
// (block-relative, g and g + 8 of its warp's 16) and their positions.
struct LaneRows {
  int g, t;
  int row0, row1, pos0, pos1;
  bool valid0, valid1;  // inside the block's `rows`
};

// Q's A fragments, rounded to BF16 (rows past the block's are zeros).
template <int HD>
__device__ __forceinline__ void LoadQueryFragments(const float* q, int64_t q_stride, int h, int t0,
                                                   const LaneRows& lr, uint32_t (&qa)[HD / 16][4]) {
  const int t = lr.t;
  const float* q0 = q + static_cast<int64_t>(t0 + lr.row0) * q_stride + h * HD + 2 * t;
  const float* q1 = q + static_cast<int64_t>(t0 + lr.row1) * q_stride + h * HD + 2 * t;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const int c = 16 * kk;
    qa[kk][0] = lr.valid0 ? PackBf16(q0[c], q0[c + 1]) : 0u;
    qa[kk][1] = lr.valid1 ? PackBf16(q1[c], q1[c + 1]) : 0u;
    qa[kk][2] = lr.valid0 ? PackBf16(q0[c + 8], q0[c + 9]) : 0u;
    qa[kk][3] = lr.valid1 ? PackBf16(q1[c + 8], q1[c + 9]) : 0u;
  }
}

// Keys [kt, kt + kBk) into k_s as stored and into vt_s transposed (zeros from key_end on); `col`
// is the KV head's first element of a row.
template <int HD>
__device__ __forceinline__ void StageKvTile(const Bf16* k, const Bf16* v, int kv_dim, int col,
                                            int kt, int key_end, uint16_t* k_s, uint16_t* vt_s) {
  using T = MmaTile<HD>;
  const int tid = threadIdx.x;
  // K as stored: a warp reads whole 16-byte chunks of consecutive rows.
  for (int idx = tid; idx < kBk * T::kChunks; idx += kThreads) {
    const int j = idx / T::kChunks, c = (idx - j * T::kChunks) * 8;
    uint4 kv = make_uint4(0, 0, 0, 0);
    if (kt + j < key_end) {
      kv = *reinterpret_cast<const uint4*>(k + static_cast<int64_t>(kt + j) * kv_dim + col + c);
    }
    *reinterpret_cast<uint4*>(k_s + j * T::kKPitch + c) = kv;
  }
  // V transposed: 16 lanes take one chunk of 16 consecutive keys, the other 16 the next
  // chunk (32 contiguous bytes a row), so the 2-byte stores hit 16 distinct words.
  for (int idx = tid; idx < kBk * T::kChunks; idx += kThreads) {
    const int j = (idx & 15) + 16 * (idx / (16 * T::kChunks));
    const int c = ((idx >> 4) % T::kChunks) * 8;
    uint4 vv = make_uint4(0, 0, 0, 0);
    if (kt + j < key_end) {
      vv = *reinterpret_cast<const uint4*>(v + static_cast<int64_t>(kt + j) * kv_dim + col + c);
    }
    const uint32_t w[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      vt_s[(c + 2 * i) * T::kVPitch + j] = static_cast<uint16_t>(w[i] & 0xffffu);
      vt_s[(c + 2 * i + 1) * T::kVPitch + j] = static_cast<uint16_t>(w[i] >> 16);
    }
  }
}

// S = Q K^T for the warp's 16 rows: 8 column tiles of 8 keys. Every lane of the warp must call
// it (mma.sync).
template <int HD>
__device__ __forceinline__ void ScoreTile(const uint32_t (&qa)[HD / 16][4], const uint16_t* k_s,
                                          const LaneRows& lr, float (&s)[kBk / 8][4]) {
  const int g = lr.g, t = lr.t;
#pragma unroll
  for (int j = 0; j < kBk / 8; ++j) {
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    const uint16_t* krow = k_s + (8 * j + g) * MmaTile<HD>::kKPitch + 2 * t;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      Mma(s[j], qa[kk], Load32(krow + 16 * kk), Load32(krow + 16 * kk + 8));
    }
  }
}

// The scores in the log2 domain, -inf where a row does not see the key (skipped for a tile
// wholly inside every row's causal window: `full`), and each row's max over its quad (mx0,
// mx1). Every lane of the warp must call it (shuffles).
__device__ __forceinline__ void MaskTile(float (&s)[kBk / 8][4], bool full, int kt, int key_end,
                                         const LaneRows& lr, int window, float scale_log2,
                                         float& mx0, float& mx1) {
  const int t = lr.t;
  // Locals rather than lr's fields in the loop: nvcc compiles the fields' version into a larger
  // mask (a second copy of the loop's compares and selects).
  const bool valid0 = lr.valid0, valid1 = lr.valid1;
  const int pos0 = lr.pos0, pos1 = lr.pos1;
  mx0 = -INFINITY;
  mx1 = -INFINITY;
#pragma unroll
  for (int j = 0; j < kBk / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float x0 = s[j][e] * scale_log2, x1 = s[j][2 + e] * scale_log2;
      if (!full) {
        const int key = kt + 8 * j + 2 * t + e;
        const bool in = key < key_end;
        if (!(in && valid0 && key <= pos0 && (window <= 0 || key > pos0 - window))) {
          x0 = -INFINITY;
        }
        if (!(in && valid1 && key <= pos1 && (window <= 0 || key > pos1 - window))) {
          x1 = -INFINITY;
        }
      }
      s[j][e] = x0;
      s[j][2 + e] = x1;
      mx0 = fmaxf(mx0, x0);
      mx1 = fmaxf(mx1, x1);
    }
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
}

// The online softmax state of the lane's two rows: running max (log2 domain) and this lane's
// partial sums of the normaliser.
struct LaneSoftmax {
  float m0, m1, l0, l1;
};

// The online softmax step given the tile's row maxima: the scores become P = 2^{x - m}, l and
// this lane's O fragments are rescaled by alpha = 2^{m_old - m} and l gains P.
template <int HD>
__device__ __forceinline__ void SoftmaxStep(float (&s)[kBk / 8][4], float mx0, float mx1,
                                            LaneSoftmax& st,
                                            float (&o)[MmaTile<HD>::kDimTiles][4]) {
  const float new0 = fmaxf(st.m0, mx0), new1 = fmaxf(st.m1, mx1);
  // A row with no key yet keeps m = -inf; subtracting 0 then gives p = 0 and alpha = 0.
  const float base0 = new0 == -INFINITY ? 0.0f : new0;
  const float base1 = new1 == -INFINITY ? 0.0f : new1;
  const float alpha0 = exp2f(st.m0 - base0), alpha1 = exp2f(st.m1 - base1);
  st.m0 = new0;
  st.m1 = new1;
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int j = 0; j < kBk / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      s[j][e] = exp2f(s[j][e] - base0);
      s[j][2 + e] = exp2f(s[j][2 + e] - base1);
      sum0 += s[j][e];
      sum1 += s[j][2 + e];
    }
  }
  st.l0 = st.l0 * alpha0 + sum0;
  st.l1 = st.l1 * alpha1 + sum1;
#pragma unroll
  for (int nt = 0; nt < MmaTile<HD>::kDimTiles; ++nt) {
    o[nt][0] *= alpha0;
    o[nt][1] *= alpha0;
    o[nt][2] *= alpha1;
    o[nt][3] *= alpha1;
  }
}

// O += P V: P's C fragments of key tiles 2kk and 2kk + 1 are the A fragment of keys
// [16kk, 16kk + 16). Every lane of the warp must call it (mma.sync).
template <int HD>
__device__ __forceinline__ void AccumulateTile(const float (&s)[kBk / 8][4], const uint16_t* vt_s,
                                               const LaneRows& lr,
                                               float (&o)[MmaTile<HD>::kDimTiles][4]) {
  const int g = lr.g, t = lr.t;
#pragma unroll
  for (int kk = 0; kk < kBk / 16; ++kk) {
    const uint32_t pa[4] = {
        PackBf16(s[2 * kk][0], s[2 * kk][1]), PackBf16(s[2 * kk][2], s[2 * kk][3]),
        PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]), PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
    for (int nt = 0; nt < MmaTile<HD>::kDimTiles; ++nt) {
      const uint16_t* vrow = vt_s + (8 * nt + g) * MmaTile<HD>::kVPitch + 16 * kk + 2 * t;
      Mma(o[nt], pa, Load32(vrow), Load32(vrow + 8));
    }
  }
}

// O / l for the lane's rows: the quad's partial sums make each row's normaliser; rows g (C
// elements 0, 1) and g + 8 (elements 2, 3) are written. Every lane of the warp must call it
// (shuffles).
template <int HD>
__device__ __forceinline__ void WriteRows(const float (&o)[MmaTile<HD>::kDimTiles][4],
                                          const LaneSoftmax& st, const LaneRows& lr, int rows,
                                          float* out, int64_t out_stride, int t0, int h) {
  const int t = lr.t;
  const float l[2] = {st.l0, st.l1};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float norm = l[half];
    norm += __shfl_xor_sync(0xffffffffu, norm, 1);
    norm += __shfl_xor_sync(0xffffffffu, norm, 2);
    const int row = lr.row0 + 8 * half;
    if (row >= rows) continue;
    const float inv = 1.0f / norm;
    float* dst = out + static_cast<int64_t>(t0 + row) * out_stride + h * HD + 2 * t;
#pragma unroll
    for (int nt = 0; nt < MmaTile<HD>::kDimTiles; ++nt) {
      dst[8 * nt] = o[nt][2 * half] * inv;
      dst[8 * nt + 1] = o[nt][2 * half + 1] * inv;
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    PrefillAttentionMmaKernel(const float* __restrict__ q, int64_t q_stride,
                              const Bf16* __restrict__ k, const Bf16* __restrict__ v,
                              float* __restrict__ out, int64_t out_stride, int tokens, int start,
                              int num_heads, int num_kv_heads, int window, float scale_log2) {
  using T = MmaTile<HD>;
  // Declared as 16-byte vectors for their alignment.
  __shared__ uint4 k_raw[kBk * T::kKPitch / 8];
  __shared__ uint4 vt_raw[HD * T::kVPitch / 8];
  uint16_t* k_s = reinterpret_cast<uint16_t*>(k_raw);
  uint16_t* vt_s = reinterpret_cast<uint16_t*>(vt_raw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y;
  const int kv_head = h / (num_heads / num_kv_heads);
  const PrefillTile tile =  // heaviest tiles first
      PrefillTileAt((gridDim.x - 1 - blockIdx.x) * kBq, kBq, tokens, start, window);
  const int kv_dim = num_kv_heads * HD;
  const int last_pos = tile.first_pos + kBq - 1;

  LaneRows lr;
  lr.g = lane >> 2;
  lr.t = lane & 3;
  lr.row0 = warp * 16 + lr.g;
  lr.row1 = lr.row0 + 8;
  lr.pos0 = tile.first_pos + lr.row0;
  lr.pos1 = tile.first_pos + lr.row1;
  lr.valid0 = lr.row0 < tile.rows;
  lr.valid1 = lr.row1 < tile.rows;
  uint32_t qa[HD / 16][4];
  LoadQueryFragments<HD>(q, q_stride, h, tile.t0, lr, qa);

  float o[T::kDimTiles][4];
#pragma unroll
  for (int nt = 0; nt < T::kDimTiles; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  LaneSoftmax st{-INFINITY, -INFINITY, 0.0f, 0.0f};

  for (int kt = tile.key_begin; kt < tile.key_end; kt += kBk) {
    __syncthreads();  // the previous tile is consumed
    StageKvTile<HD>(k, v, kv_dim, kv_head * HD, kt, tile.key_end, k_s, vt_s);
    __syncthreads();
    float s[kBk / 8][4];
    ScoreTile<HD>(qa, k_s, lr, s);
    // Online softmax in the log2 domain. Tiles wholly inside every row's causal window skip
    // the mask.
    const bool full = kt + kBk - 1 <= tile.first_pos && (window <= 0 || kt > last_pos - window);
    float mx0, mx1;
    MaskTile(s, full, kt, tile.key_end, lr, window, scale_log2, mx0, mx1);
    SoftmaxStep<HD>(s, mx0, mx1, st, o);
    AccumulateTile<HD>(s, vt_s, lr, o);
  }
  WriteRows<HD>(o, st, lr, tile.rows, out, out_stride, tile.t0, h);
}

template <int HD>
absl::Status Launch(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v, float* out,
                    int64_t out_stride, int tokens, int start, int num_heads, int num_kv_heads,
                    int window, StreamHandle stream) {
  const dim3 grid(static_cast<unsigned>(CeilDiv(tokens, kBq)), num_heads);
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(HD));
  PrefillAttentionMmaKernel<HD>
      <<<grid, kThreads, 0, AsStream(stream)>>>(q, q_stride, k, v, out, out_stride, tokens, start,
                                                num_heads, num_kv_heads, window, scale_log2);
  return LaunchStatus("PrefillAttentionMmaKernel");
}

}  // namespace

absl::Status PrefillAttentionMma(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v,
                                 float* out, int64_t out_stride, int tokens, int start,
                                 int num_heads, int num_kv_heads, int head_dim, int window,
                                 StreamHandle stream) {
  return WithTensorCoreHeadDim(head_dim, "mma.sync attention", [&](auto hd) {
    return Launch<decltype(hd)::value>(q, q_stride, k, v, out, out_stride, tokens, start, num_heads,
                                       num_kv_heads, window, stream);
  });
}

}  // namespace scd::cuda::internal
