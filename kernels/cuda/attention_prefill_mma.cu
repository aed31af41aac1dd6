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

template <int HD>
__global__ void __launch_bounds__(kThreads)
    PrefillAttentionMmaKernel(const float* __restrict__ q, int64_t q_stride,
                              const Bf16* __restrict__ k, const Bf16* __restrict__ v,
                              float* __restrict__ out, int64_t out_stride, int tokens, int start,
                              int num_heads, int num_kv_heads, int window, float scale_log2) {
  constexpr int kKPitch = HD + 8;   // K tile [key][d], BF16; 16-byte rows, conflict-free reads
  constexpr int kVPitch = kBk + 8;  // V tile transposed [d][key], BF16
  constexpr int kChunks = HD / 8;   // 16-byte chunks per K/V row
  constexpr int kDimTiles = HD / 8;
  // Declared as 16-byte vectors for their alignment.
  __shared__ uint4 k_raw[kBk * kKPitch / 8];
  __shared__ uint4 vt_raw[HD * kVPitch / 8];
  uint16_t* k_s = reinterpret_cast<uint16_t*>(k_raw);
  uint16_t* vt_s = reinterpret_cast<uint16_t*>(vt_raw);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y;
  const int kv_head = h / (num_heads / num_kv_heads);
  const int t0 = (gridDim.x - 1 - blockIdx.x) * kBq;  // heaviest tiles first
  const int rows = min(kBq, tokens - t0);
  const int kv_dim = num_kv_heads * HD;
  const int first_pos = start + t0;
  const int key_end = first_pos + rows;  // exclusive
  const int key_begin = window > 0 ? max(0, first_pos - window + 1) : 0;
  const int last_pos = first_pos + kBq - 1;

  // This lane's two query rows (block-relative) and their positions.
  const int row0 = warp * 16 + g, row1 = row0 + 8;
  const int pos0 = first_pos + row0, pos1 = first_pos + row1;
  const bool valid0 = row0 < rows, valid1 = row1 < rows;

  // Q's A fragments, rounded to BF16 (rows past `rows` are zeros).
  uint32_t qa[HD / 16][4];
  {
    const float* q0 = q + static_cast<int64_t>(t0 + row0) * q_stride + h * HD + 2 * t;
    const float* q1 = q + static_cast<int64_t>(t0 + row1) * q_stride + h * HD + 2 * t;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      const int c = 16 * kk;
      qa[kk][0] = valid0 ? PackBf16(q0[c], q0[c + 1]) : 0u;
      qa[kk][1] = valid1 ? PackBf16(q1[c], q1[c + 1]) : 0u;
      qa[kk][2] = valid0 ? PackBf16(q0[c + 8], q0[c + 9]) : 0u;
      qa[kk][3] = valid1 ? PackBf16(q1[c + 8], q1[c + 9]) : 0u;
    }
  }

  float o[kDimTiles][4];
#pragma unroll
  for (int nt = 0; nt < kDimTiles; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // l: this lane's partial sums

  for (int kt = key_begin; kt < key_end; kt += kBk) {
    __syncthreads();  // the previous tile is consumed
    // K as stored: a warp reads whole 16-byte chunks of consecutive rows.
    for (int idx = tid; idx < kBk * kChunks; idx += kThreads) {
      const int j = idx / kChunks, c = (idx - j * kChunks) * 8;
      uint4 kv = make_uint4(0, 0, 0, 0);
      if (kt + j < key_end) {
        kv = *reinterpret_cast<const uint4*>(k + static_cast<int64_t>(kt + j) * kv_dim +
                                             kv_head * HD + c);
      }
      *reinterpret_cast<uint4*>(k_s + j * kKPitch + c) = kv;
    }
    // V transposed: 16 lanes take one chunk of 16 consecutive keys, the other 16 the next
    // chunk (32 contiguous bytes a row), so the 2-byte stores hit 16 distinct words.
    for (int idx = tid; idx < kBk * kChunks; idx += kThreads) {
      const int j = (idx & 15) + 16 * (idx / (16 * kChunks));
      const int c = ((idx >> 4) % kChunks) * 8;
      uint4 vv = make_uint4(0, 0, 0, 0);
      if (kt + j < key_end) {
        vv = *reinterpret_cast<const uint4*>(v + static_cast<int64_t>(kt + j) * kv_dim +
                                             kv_head * HD + c);
      }
      const uint32_t w[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        vt_s[(c + 2 * i) * kVPitch + j] = static_cast<uint16_t>(w[i] & 0xffffu);
        vt_s[(c + 2 * i + 1) * kVPitch + j] = static_cast<uint16_t>(w[i] >> 16);
      }
    }
    __syncthreads();

    // S = Q K^T: 8 column tiles of 8 keys.
    float s[kBk / 8][4];
#pragma unroll
    for (int j = 0; j < kBk / 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      const uint16_t* krow = k_s + (8 * j + g) * kKPitch + 2 * t;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        Mma(s[j], qa[kk], Load32(krow + 16 * kk), Load32(krow + 16 * kk + 8));
      }
    }

    // Online softmax in the log2 domain. Tiles wholly inside every row's causal window skip
    // the mask.
    const bool full = kt + kBk - 1 <= first_pos && (window <= 0 || kt > last_pos - window);
    float mx0 = -INFINITY, mx1 = -INFINITY;
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
    const float new0 = fmaxf(m0, mx0), new1 = fmaxf(m1, mx1);
    // A row with no key yet keeps m = -inf; subtracting 0 then gives p = 0 and alpha = 0.
    const float base0 = new0 == -INFINITY ? 0.0f : new0;
    const float base1 = new1 == -INFINITY ? 0.0f : new1;
    const float alpha0 = exp2f(m0 - base0), alpha1 = exp2f(m1 - base1);
    m0 = new0;
    m1 = new1;
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
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int nt = 0; nt < kDimTiles; ++nt) {
      o[nt][0] *= alpha0;
      o[nt][1] *= alpha0;
      o[nt][2] *= alpha1;
      o[nt][3] *= alpha1;
    }

    // O += P V: P's C fragments of key tiles 2kk and 2kk + 1 are the A fragment of keys
    // [16kk, 16kk + 16).
#pragma unroll
    for (int kk = 0; kk < kBk / 16; ++kk) {
      const uint32_t pa[4] = {PackBf16(s[2 * kk][0], s[2 * kk][1]),
                              PackBf16(s[2 * kk][2], s[2 * kk][3]),
                              PackBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              PackBf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nt = 0; nt < kDimTiles; ++nt) {
        const uint16_t* vrow = vt_s + (8 * nt + g) * kVPitch + 16 * kk + 2 * t;
        Mma(o[nt], pa, Load32(vrow), Load32(vrow + 8));
      }
    }
  }

  // The quad's partial sums make each row's normaliser; rows g (C elements 0, 1) and g + 8
  // (elements 2, 3) are written.
  const float l[2] = {l0, l1};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float norm = l[half];
    norm += __shfl_xor_sync(0xffffffffu, norm, 1);
    norm += __shfl_xor_sync(0xffffffffu, norm, 2);
    const int row = row0 + 8 * half;
    if (row >= rows) continue;
    const float inv = 1.0f / norm;
    float* dst = out + static_cast<int64_t>(t0 + row) * out_stride + h * HD + 2 * t;
#pragma unroll
    for (int nt = 0; nt < kDimTiles; ++nt) {
      dst[8 * nt] = o[nt][2 * half] * inv;
      dst[8 * nt + 1] = o[nt][2 * half + 1] * inv;
    }
  }
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
