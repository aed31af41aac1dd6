// CPU reference kernels (see ops.h). GEMMs go to OpenBLAS (a decode step's few rows to
// SmallBatchLinear); the rest are plain loops that GCC auto-vectorises (AVX2/FMA), except the
// exponentials of softmax and SwiGLU, which it leaves scalar: those have an AVX2 loop doing
// the scalar one's operations, so both give the same bits. Prefill attention is blocked over
// queries so that causal masking only wastes the diagonal block, and each block is two sgemm
// calls (scores = Q·Kᵀ, out = P·V) per query head, which keeps prefill near GEMM speed; a
// lone query (a decode step) runs DecodeAttention (decode_attention.h).
#include "kernels/cpu/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/small_batch_linear.h"

#if defined(__AVX2__) && defined(__FMA__)
#define SCD_OPS_AVX2 1
#include <immintrin.h>
#endif

namespace scd::cpu {
namespace {

constexpr int kQueryBlock = 128;

// exp(x) for x <= 0 (softmax after max-subtraction), accurate to a few ulp, written so the
// loop vectorises: x = n·ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n by
// exponent-bit arithmetic. Inputs below -87 flush to 0.
inline float ExpNonPositive(float x) {
  x = std::max(x, -87.0f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = std::fma(n, -0.693145751953125f, std::fma(n, -1.428606765330187e-06f, x));
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

#if SCD_OPS_AVX2
// ExpNonPositive on 8 floats: the same operations in the same order, so the same bits.
inline __m256 ExpNonPositive8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);  // std::max's order: x unless below -87
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693145751953125f),
                                   _mm256_fmadd_ps(n, _mm256_set1_ps(-1.428606765330187e-06f), x));
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
#endif

// Whether the AVX2 variants of the elementwise loops run (the scalar ones are their twins).
inline bool UseAvx2() {
#if SCD_OPS_AVX2
  return ActiveIsa() != CpuIsa::kScalar;
#else
  return false;
#endif
}

// Softmax of row[0, valid) in place; entries [valid, cols) are set to 0. The exponentials
// are elementwise (8 at a time on AVX2), their sum runs in index order in every variant.
void SoftmaxPrefix(float* row, int valid, int cols) {
  float max_v = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < valid; ++j) max_v = std::max(max_v, row[j]);
  int j = 0;
#if SCD_OPS_AVX2
  if (UseAvx2()) {
    const __m256 m = _mm256_set1_ps(max_v);
    for (; j + 8 <= valid; j += 8) {
      _mm256_storeu_ps(row + j, ExpNonPositive8(_mm256_sub_ps(_mm256_loadu_ps(row + j), m)));
    }
  }
#endif
  for (; j < valid; ++j) row[j] = ExpNonPositive(row[j] - max_v);
  float sum = 0.0f;
  for (int i = 0; i < valid; ++i) sum += row[i];
  const float inv = 1.0f / sum;
  for (int i = 0; i < valid; ++i) row[i] *= inv;
  for (int i = valid; i < cols; ++i) row[i] = 0.0f;
}

}  // namespace

void Linear(const float* x, const float* w, const float* bias, float* y, int m, int n, int k) {
  // A decode step's 1 to kSmallBatchMaxRows rows, whatever W's size: SmallBatchLinear reads W
  // once for them all near the memory's bandwidth (OpenBLAS's sgemm packs W first and costs
  // several GEMVs' time at these row counts; a GEMV per row reads W once per row), and gives a
  // row the same bits alone or in any batch (small_batch_linear.h). `scd-bench small-batch`
  // times them. With SmallBatchLinear switched off (benchmarks' OpenBLAS comparison): a GEMV
  // per row up to kGemvMaxRows rows, then sgemm. Prefill's many rows: sgemm.
  constexpr int kGemvMaxRows = 4;
  if (m <= kSmallBatchMaxRows && SmallBatchLinearEnabled()) {
    SmallBatchLinear(x, w, y, m, n, k);
  } else if (m <= kGemvMaxRows) {
    for (int r = 0; r < m; ++r) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, x + static_cast<long>(r) * k, 1,
                  0.0f, y + static_cast<long>(r) * n, 1);
    }
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
  }
  if (bias != nullptr) {
    for (int r = 0; r < m; ++r) {
      float* row = y + static_cast<long>(r) * n;
      for (int j = 0; j < n; ++j) row[j] += bias[j];
    }
  }
}

void RmsNorm(const float* x, const float* gain, float* y, int rows, int dim, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* in = x + static_cast<long>(r) * dim;
    float* out = y + static_cast<long>(r) * dim;
    float ss = 0.0f;
    for (int i = 0; i < dim; ++i) ss += in[i] * in[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) out[i] = in[i] * inv * gain[i];
  }
}

void RopeTable(int tokens, int head_dim, const int32_t* positions, const float* inv_freq,
               float* cos_out, float* sin_out) {
  const int half = head_dim / 2;
  for (int t = 0; t < tokens; ++t) {
    const float pos = static_cast<float>(positions[t]);
    for (int i = 0; i < half; ++i) {
      // float32 angle, as HF computes it (outer product of float positions and inv_freq).
      const float angle = pos * inv_freq[i];
      cos_out[static_cast<long>(t) * half + i] =
          static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_out[static_cast<long>(t) * half + i] =
          static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

void ApplyRopeTable(float* x, int tokens, int num_heads, int head_dim, const float* cos_t,
                    const float* sin_t) {
  const int half = head_dim / 2;
  for (int t = 0; t < tokens; ++t) {
    const float* cv = cos_t + static_cast<long>(t) * half;
    const float* sv = sin_t + static_cast<long>(t) * half;
    float* row = x + static_cast<long>(t) * num_heads * head_dim;
    for (int h = 0; h < num_heads; ++h) {
      float* a = row + h * head_dim;
      float* b = a + half;
      for (int i = 0; i < half; ++i) {
        const float a0 = a[i], b0 = b[i];
        a[i] = a0 * cv[i] - b0 * sv[i];
        b[i] = b0 * cv[i] + a0 * sv[i];
      }
    }
  }
}

void ApplyRope(float* x, int tokens, int num_heads, int head_dim, const int32_t* positions,
               const float* inv_freq) {
  std::vector<float> cos_t(static_cast<size_t>(tokens) * (head_dim / 2)), sin_t(cos_t.size());
  RopeTable(tokens, head_dim, positions, inv_freq, cos_t.data(), sin_t.data());
  ApplyRopeTable(x, tokens, num_heads, head_dim, cos_t.data(), sin_t.data());
}

void SwiGlu(const float* gate, const float* up, float* out, int count) {
  // sigmoid(g) from e = exp(-|g|) <= 1, so ExpNonPositive serves both signs:
  // g >= 0: 1 / (1 + e);  g < 0: e / (1 + e). The AVX2 loop does the scalar one's operations.
  int i = 0;
#if SCD_OPS_AVX2
  if (UseAvx2()) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (; i + 8 <= count; i += 8) {
      const __m256 g = _mm256_loadu_ps(gate + i);
      const __m256 e = ExpNonPositive8(_mm256_or_ps(g, sign));  // -|g|
      const __m256 num =
          _mm256_blendv_ps(e, one, _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_GE_OQ));
      const __m256 sig = _mm256_div_ps(num, _mm256_add_ps(one, e));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
    }
  }
#endif
  for (; i < count; ++i) {
    const float g = gate[i];
    const float e = ExpNonPositive(-std::abs(g));
    const float sig = (g >= 0.0f ? 1.0f : e) / (1.0f + e);
    out[i] = g * sig * up[i];
  }
}

void SoftmaxRows(float* x, int rows, int cols) {
  for (int r = 0; r < rows; ++r) SoftmaxPrefix(x + static_cast<long>(r) * cols, cols, cols);
}

long AttentionScratchFloats(int tokens, int start, int num_heads) {
  // A block of queries' scores, or a lone query's (a decode step, or a prefill's last block of
  // one) for every head at once.
  const long rows = std::max(std::min(tokens, kQueryBlock), num_heads);
  return rows * (start + tokens);
}

void CausalAttention(const float* q, const float* k, const float* v, float* out, int tokens,
                     int start, int num_heads, int num_kv_heads, int head_dim, int window,
                     float* scratch) {
  const int q_stride = num_heads * head_dim;
  const int kv_stride = num_kv_heads * head_dim;
  const int group = num_heads / num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int t0 = 0; t0 < tokens; t0 += kQueryBlock) {
    const int rows = std::min(kQueryBlock, tokens - t0);
    const int first_pos = start + t0;      // absolute position of the block's first query
    const int key_end = first_pos + rows;  // keys [key_begin, key_end)
    const int key_begin = window > 0 ? std::max(0, first_pos - window + 1) : 0;
    const int keys = key_end - key_begin;
    if (rows == 1) {  // a decode step: two sgemm calls per head would cost more
      const long first_key = static_cast<long>(key_begin) * kv_stride;
      DecodeAttention(q + static_cast<long>(t0) * q_stride, k + first_key, v + first_key,
                      out + static_cast<long>(t0) * q_stride, keys, num_heads, num_kv_heads,
                      head_dim, scale, scratch);
      continue;
    }
    for (int h = 0; h < num_heads; ++h) {
      const int g = h / group;
      const float* qh = q + static_cast<long>(t0) * q_stride + h * head_dim;
      const float* kh = k + static_cast<long>(key_begin) * kv_stride + g * head_dim;
      const float* vh = v + static_cast<long>(key_begin) * kv_stride + g * head_dim;
      float* oh = out + static_cast<long>(t0) * q_stride + h * head_dim;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, head_dim, scale, qh,
                  q_stride, kh, kv_stride, 0.0f, scratch, keys);
      for (int r = 0; r < rows; ++r) {
        const int pos = first_pos + r;
        float* row = scratch + static_cast<long>(r) * keys;
        const int lo = window > 0 ? std::max(0, pos - window + 1) - key_begin : 0;
        const int hi = pos + 1 - key_begin;  // exclusive
        for (int j = 0; j < lo; ++j) row[j] = 0.0f;
        SoftmaxPrefix(row + lo, hi - lo, keys - lo);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, keys, 1.0f, scratch,
                  keys, vh, kv_stride, 0.0f, oh, q_stride);
    }
  }
}

void Embed(const float* table, const int32_t* ids, float* out, int tokens, int dim) {
  for (int t = 0; t < tokens; ++t) {
    std::memcpy(out + static_cast<long>(t) * dim, table + static_cast<long>(ids[t]) * dim,
                sizeof(float) * dim);
  }
}

void NegLogLikelihood(const float* logits, const int32_t* targets, float* out, int rows,
                      int vocab) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<long>(r) * vocab;
    float max_v = row[0];
    for (int j = 1; j < vocab; ++j) max_v = std::max(max_v, row[j]);
    double sum = 0.0;
    for (int j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(row[j] - max_v));
    out[r] = static_cast<float>(std::log(sum) + max_v - row[targets[r]]);
  }
}

}  // namespace scd::cpu
