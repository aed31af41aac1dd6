// See decode_attention.h.
#include "kernels/cpu/decode_attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"

#if defined(__AVX2__) && defined(__FMA__)
#define SCD_ATTENTION_AVX2 1
#include <immintrin.h>
#endif

namespace scd::cpu {
namespace {

// KV bytes of a step's attention below which a second thread does not pay for waking.
constexpr long kParallelBytes = long{128} << 10;

// The heads [h0, h1) of one query, with the geometry every variant shares.
struct HeadRange {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  float* scores;  // [num_heads][keys]
  int keys;
  int stride;  // floats between K (and V) rows
  int head_dim;
  int group;  // query heads per KV head
  float scale;
  int h0, h1;

  const float* k_row(int j, int h) const {
    return k + static_cast<long>(j) * stride + (h / group) * head_dim;
  }
  const float* v_row(int j, int h) const {
    return v + static_cast<long>(j) * stride + (h / group) * head_dim;
  }
  float* head_scores(int h) const { return scores + static_cast<long>(h) * keys; }
  float* head_out(int h) const { return out + static_cast<long>(h) * head_dim; }
};

// score(h, j) in the header's order.
inline float Score(const float* q, const float* k, int head_dim, float scale) {
  float lanes[8] = {};
  int i = 0;
  for (; i + 8 <= head_dim; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] = std::fma(q[i + l], k[i + l], lanes[l]);
  }
  float dot = 0.0f;
  for (float x : lanes) dot += x;
  for (; i < head_dim; ++i) dot = std::fma(q[i], k[i], dot);
  return dot * scale;
}

void ScoresScalar(const HeadRange& r, int j0) {
  for (int j = j0; j < r.keys; ++j) {
    for (int h = r.h0; h < r.h1; ++h) {
      r.head_scores(h)[j] =
          Score(r.q + static_cast<long>(h) * r.head_dim, r.k_row(j, h), r.head_dim, r.scale);
    }
  }
}

void WeightedSumScalar(const HeadRange& r) {
  for (int h = r.h0; h < r.h1; ++h) std::fill(r.head_out(h), r.head_out(h) + r.head_dim, 0.0f);
  for (int j = 0; j < r.keys; ++j) {
    for (int h = r.h0; h < r.h1; ++h) {
      const float p = r.head_scores(h)[j];
      const float* vh = r.v_row(j, h);
      float* oh = r.head_out(h);
      for (int i = 0; i < r.head_dim; ++i) oh[i] = std::fma(p, vh[i], oh[i]);
    }
  }
}

#if SCD_ATTENTION_AVX2
// Lane l of the 8 vectors a[t] (key t's lane sums) gathered into one vector per lane, then
// added in lane order from 0: key t's score sum, in element t.
inline __m256 SumLanesOf8(const __m256* a) {
  __m256 t[8], u[8];
  for (int p = 0; p < 4; ++p) {
    t[2 * p] = _mm256_unpacklo_ps(a[2 * p], a[2 * p + 1]);
    t[2 * p + 1] = _mm256_unpackhi_ps(a[2 * p], a[2 * p + 1]);
  }
  for (int p = 0; p < 2; ++p) {  // lanes {0,4}, {1,5}, {2,6}, {3,7} of four keys each
    u[4 * p + 0] = _mm256_shuffle_ps(t[4 * p], t[4 * p + 2], 0x44);
    u[4 * p + 1] = _mm256_shuffle_ps(t[4 * p], t[4 * p + 2], 0xEE);
    u[4 * p + 2] = _mm256_shuffle_ps(t[4 * p + 1], t[4 * p + 3], 0x44);
    u[4 * p + 3] = _mm256_shuffle_ps(t[4 * p + 1], t[4 * p + 3], 0xEE);
  }
  __m256 sum = _mm256_setzero_ps();
  for (int l = 0; l < 8; ++l) {
    const int m = l & 3;
    const __m256 lane = l < 4 ? _mm256_permute2f128_ps(u[m], u[4 + m], 0x20)
                              : _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    sum = _mm256_add_ps(sum, lane);
  }
  return sum;
}

// Scores of keys in blocks of 8, each block's K rows read once for all the heads; the rest by
// the scalar loop. head_dim is a multiple of 8.
void ScoresAvx2(const HeadRange& r) {
  const __m256 scale = _mm256_set1_ps(r.scale);
  int j0 = 0;
  for (; j0 + 8 <= r.keys; j0 += 8) {
    for (int h = r.h0; h < r.h1; ++h) {
      const float* qh = r.q + static_cast<long>(h) * r.head_dim;
      const float* k0 = r.k_row(j0, h);
      __m256 acc[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
      for (int i = 0; i < r.head_dim; i += 8) {
        const __m256 qv = _mm256_loadu_ps(qh + i);
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          acc[t] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + static_cast<long>(t) * r.stride + i),
                                   acc[t]);
        }
      }
      _mm256_storeu_ps(r.head_scores(h) + j0, _mm256_mul_ps(SumLanesOf8(acc), scale));
    }
  }
  ScoresScalar(r, j0);
}

// out(h, [c0, c0 + 8·N)) over keys [j0, j1), kept in N registers: loaded (or zero at j0 = 0),
// one fused multiply-add per key and vector, stored.
template <int N>
void WeightedChunk(const HeadRange& r, int h, int c0, int j0, int j1) {
  float* oh = r.head_out(h) + c0;
  const float* ps = r.head_scores(h);
  __m256 acc[N];
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) acc[c] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(oh + 8 * c);
  for (int j = j0; j < j1; ++j) {
    const __m256 p = _mm256_broadcast_ss(ps + j);
    const float* vj = r.v_row(j, h) + c0;
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) _mm256_storeu_ps(oh + 8 * c, acc[c]);
}

// Keys in blocks of kKeyBlock (their V rows read once for all the heads), a head's output in
// chunks of up to 64 floats per block.
void WeightedSumAvx2(const HeadRange& r) {
  constexpr int kKeyBlock = 16;
  using ChunkFn = void (*)(const HeadRange&, int, int, int, int);
  static constexpr ChunkFn kChunks[] = {WeightedChunk<1>, WeightedChunk<2>, WeightedChunk<3>,
                                        WeightedChunk<4>, WeightedChunk<5>, WeightedChunk<6>,
                                        WeightedChunk<7>, WeightedChunk<8>};
  if (r.keys == 0) {
    for (int h = r.h0; h < r.h1; ++h) std::fill(r.head_out(h), r.head_out(h) + r.head_dim, 0.0f);
    return;
  }
  for (int j0 = 0; j0 < r.keys; j0 += kKeyBlock) {
    const int j1 = std::min(r.keys, j0 + kKeyBlock);
    for (int h = r.h0; h < r.h1; ++h) {
      for (int c0 = 0; c0 < r.head_dim; c0 += 64) {
        kChunks[std::min(64, r.head_dim - c0) / 8 - 1](r, h, c0, j0, j1);
      }
    }
  }
}
#else
// Builds without AVX2 run the scalar loops under these names (AttendHeads never picks them).
void ScoresAvx2(const HeadRange& r) { ScoresScalar(r, 0); }
void WeightedSumAvx2(const HeadRange& r) { WeightedSumScalar(r); }
#endif  // SCD_ATTENTION_AVX2

void AttendHeads(const HeadRange& r) {
#if SCD_ATTENTION_AVX2
  const bool avx2 = ActiveIsa() != CpuIsa::kScalar && r.head_dim % 8 == 0;
#else
  const bool avx2 = false;
#endif
  avx2 ? ScoresAvx2(r) : ScoresScalar(r, 0);
  for (int h = r.h0; h < r.h1; ++h) SoftmaxRows(r.head_scores(h), 1, r.keys);
  avx2 ? WeightedSumAvx2(r) : WeightedSumScalar(r);
}

}  // namespace

void DecodeAttention(const float* q, const float* k, const float* v, float* out, int keys,
                     int num_heads, int num_kv_heads, int head_dim, float scale, float* scores,
                     int threads) {
  const int stride = num_kv_heads * head_dim;
  const int group = num_heads / num_kv_heads;
  const long bytes = 2 * static_cast<long>(keys) * stride * static_cast<long>(sizeof(float));
  if (threads <= 0) threads = bytes < kParallelBytes ? 1 : ComputePool::Global().threads();
  const int tasks = std::min(num_kv_heads, threads);
  auto task = [&](int t) {
    const int g0 = t * num_kv_heads / tasks, g1 = (t + 1) * num_kv_heads / tasks;
    AttendHeads(HeadRange{q, k, v, out, scores, keys, stride, head_dim, group, scale, g0 * group,
                          g1 * group});
  };
  if (tasks == 1) return task(0);
  ComputePool::Global().Run(tasks, task, tasks);
}

}  // namespace scd::cpu
