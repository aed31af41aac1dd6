// See q8_linear.h.
#include "kernels/cpu/q8_linear.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/cpu_isa.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SCD_Q8_AVX2 1
#include <immintrin.h>
#endif

namespace scd::cpu {
namespace {

constexpr int kLanes = 8;  // float lanes per accumulator; each sums 4 products per block
constexpr size_t kTaskBytes = size_t{64} << 10;  // W a task of the int8 kernel takes
// One input row's tasks: up to kRowTaskBytes, while the job still gives each thread two.
// A lone row reuses nothing it reads, and longer runs of W keep its streams going: these
// tasks with prefetch 1 KB ahead took 8 to 12% less time than 64 KB and 2 KB over a decode
// step's matrices (2 threads, side by side), where 4 and 16 rows were as fast or faster with
// 64 KB and 2 KB.
constexpr size_t kRowTaskBytes = size_t{256} << 10;
constexpr size_t kBytesPerThread = size_t{64} << 10;   // W below which one more thread won't pay
constexpr size_t kConvertTaskElems = size_t{1} << 16;  // weights a conversion task takes
constexpr size_t kScratchFloats = size_t{1} << 20;     // prefill's dequantized W chunk (4 MB)

size_t QuantStride(int blocks) { return static_cast<size_t>(blocks) * kQ8Block; }

size_t Groups(int rows) { return (static_cast<size_t>(rows) + kQ8Group - 1) / kQ8Group; }

// A Q8Matrix's geometry and size for W[rows, cols], without its bytes.
Q8Matrix Q8Shape(int rows, int cols) {
  Q8Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.blocks = (cols + kQ8Block - 1) / kQ8Block;
  const size_t spans = (static_cast<size_t>(m.blocks) + kQ8Span - 1) / kQ8Span;
  m.group_bytes = spans * kQ8SpanScaleBytes + QuantStride(m.blocks) * kQ8Group;
  m.size = (Groups(rows) * m.group_bytes + 63) / 64 * 64;
  return m;
}

// Runs fn(begin, end) over [0, count) in pieces of `per_task`, on the pool when there is more
// than one piece. Pieces never overlap, so the result does not depend on the threads.
template <typename Fn>
void ForPieces(size_t count, size_t per_task, int max_threads, const Fn& fn) {
  per_task = std::max<size_t>(per_task, 1);
  const int tasks = static_cast<int>((count + per_task - 1) / per_task);
  auto task = [&](int i) {
    const size_t begin = static_cast<size_t>(i) * per_task;
    fn(begin, std::min(count, begin + per_task));
  };
  if (tasks <= 1 || max_threads == 1) {
    for (int i = 0; i < tasks; ++i) task(i);
    return;
  }
  ComputePool::Global().Run(tasks, task, max_threads);
}

// max|v[i]| over i < n (exact, so the vector path and the loop agree).
float AbsMax(const float* v, int n) {
#if SCD_Q8_AVX2
  if (n == kQ8Block) {
    const __m256 mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_and_ps(_mm256_loadu_ps(v), mask);
    for (int k = 8; k < kQ8Block; k += 8) {
      m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(v + k), mask));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
  }
#endif
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax;
}

// q[i] = round-half-even(v[i] / scale) for i < n, clamped to ±127, and 0 up to kQ8Block.
// The AVX2 path does the same IEEE division and rounding, so both give the same quants.
void QuantizeBlock(const float* v, int n, float scale, int8_t* q) {
  if (scale == 0.0f) {
    std::memset(q, 0, kQ8Block);
    return;
  }
#if SCD_Q8_AVX2
  if (n == kQ8Block) {
    const __m256 s = _mm256_set1_ps(scale);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i i32[4];
    for (int k = 0; k < 4; ++k) {
      __m256 t = _mm256_div_ps(_mm256_loadu_ps(v + 8 * k), s);
      t = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      i32[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(t, lo), hi));
    }
    // packs interleave the 128-bit halves; the permute puts the 32 bytes back in order.
    const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]);
    const __m256i i16b = _mm256_packs_epi32(i32[2], i32[3]);
    const __m256i i8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16a, i16b),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), i8);
    return;
  }
#endif
  for (int i = 0; i < n; ++i) {
    const float t = std::nearbyint(v[i] / scale);
    q[i] = static_cast<int8_t>(std::min(127.0f, std::max(-127.0f, t)));
  }
  std::memset(q + n, 0, kQ8Block - n);
}

// The decode rows, quantized per block with float scales. Scales are [m, scale_stride], the
// stride rounded up to 8 (zero-filled) so that the AVX2 kernel loads 8 at a time.
struct Activations {
  const int8_t* q = nullptr;
  const uint8_t* abs = nullptr;  // |q|, for the sign trick; same layout
  const float* s = nullptr;
  size_t q_stride = 0;
  size_t s_stride = 0;
};

// Per-thread storage for Activations, grown as needed and reused across calls.
Activations QuantizeActivations(const float* x, int m, int cols, int blocks) {
  thread_local AlignedArray<int8_t> q;
  thread_local AlignedArray<uint8_t> abs;
  thread_local AlignedArray<float> s;
  Activations a;
  a.q_stride = QuantStride(blocks);
  a.s_stride = (static_cast<size_t>(blocks) + 7) / 8 * 8;
  if (q.size() < a.q_stride * m) {
    q = AlignedArray<int8_t>(a.q_stride * m);
    abs = AlignedArray<uint8_t>(a.q_stride * m);
  }
  if (s.size() < a.s_stride * m) s = AlignedArray<float>(a.s_stride * m);
  for (int r = 0; r < m; ++r) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    float* sr = s.data() + r * a.s_stride;
    for (int b = 0; b < blocks; ++b) {
      const int n = std::min(kQ8Block, cols - b * kQ8Block);
      const float* v = xr + static_cast<size_t>(b) * kQ8Block;
      sr[b] = AbsMax(v, n) / 127.0f;
      QuantizeBlock(v, n, sr[b], q.data() + r * a.q_stride + static_cast<size_t>(b) * kQ8Block);
    }
    std::fill(sr + blocks, sr + a.s_stride, 0.0f);
  }
  // Through local pointers: the loop vectorises only when it need not reload the arrays.
  const int8_t* const qd = q.data();
  uint8_t* const ad = abs.data();
  const size_t n = a.q_stride * m;
  for (size_t i = 0; i < n; ++i) ad[i] = static_cast<uint8_t>(qd[i] < 0 ? -qd[i] : qd[i]);
  a.q = q.data();
  a.abs = abs.data();
  a.s = s.data();
  return a;
}

// The lanes of a (W row, input row) accumulator added in a fixed tree, the one the AVX2
// variant's 128-bit halves, then pairs, then the last two make.
float SumLanes(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

// W rows [j0, j1) against the m input rows, one pair at a time, in the AVX2 variant's order:
// lane l of a block sums products 4l..4l+3 exactly, then lane += (float)sum · (s_w · s_x).
void DotsScalar(const Activations& a, int m, const Q8Matrix& w, const float* bias, float* y, int j0,
                int j1) {
  for (int j = j0; j < j1; ++j) {
    for (int r = 0; r < m; ++r) {
      const int8_t* xq = a.q + r * a.q_stride;
      const float* xs = a.s + r * a.s_stride;
      float lanes[kLanes] = {};
      for (int b = 0; b < w.blocks; ++b) {
        const float d = HalfToFloat(w.block_scale(j, b)) * xs[b];
        const int8_t* wq = w.block_quants(j, b);
        const int8_t* xb = xq + QuantStride(b);
        for (int l = 0; l < kLanes; ++l) {
          int sum = 0;
          for (int t = 4 * l; t < 4 * l + 4; ++t) sum += int{wq[t]} * int{xb[t]};
          lanes[l] = std::fma(static_cast<float>(sum), d, lanes[l]);
        }
      }
      const float v = SumLanes(lanes);
      y[static_cast<size_t>(r) * w.rows + j] = bias != nullptr ? v + bias[j] : v;
    }
  }
}

#if SCD_Q8_AVX2
// How far ahead of its reads W's stream is prefetched, for M input rows.
constexpr size_t PrefetchBytes(int m) { return m == 1 ? 1024 : 2048; }

// The combined scales s_w · s_x of span s's blocks for W rows [q0, q0 + R) of the group and
// input rows [0, M), from the span's scales line. Past a row's last block both the line and
// the activations' scales are zero.
template <int M, int R>
void CombinedScales(const Activations& a, const int8_t* line, int s, int q0,
                    float (*d)[M][kQ8Span]) {
#pragma GCC unroll 4
  for (int q = 0; q < R; ++q) {
    const __m256 sw =
        _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(line) + q0 + q));
#pragma GCC unroll 4
    for (int r = 0; r < M; ++r) {
      const __m256 sx = _mm256_load_ps(a.s + r * a.s_stride + s * kQ8Span);
      _mm256_store_ps(d[q][r], _mm256_mul_ps(sw, sx));
    }
  }
}

// Rows [q0, q0 + R) of W groups gs[0..G) against input rows [0, M): each W block is loaded
// once for the M rows, each input block once per block position for every W row (from L1).
// The G groups are read side by side, as G streams: on this kernel's hosts memory answered a
// few streams at once faster than one. The sign trick turns the signed·signed bytes into
// unsigned·signed for maddubs: |x| · (w · sign(x)), with |x| stored beside x; pairs of
// products fit int16 (2 · 127 · 127 < 32767) and madd with ones sums them to 8 lanes of 4.
// With `prefetch`, each group's stream is fetched PrefetchBytes(M) ahead: the hardware
// prefetcher alone leaves the kernel waiting on memory. A row's operations do not depend on
// G, so neither do its bits.
template <int M, int R, int G>
void DotsAvx2(const Activations& a, const Q8Matrix& w, const float* bias, float* y, const int* gs,
              int q0, bool prefetch) {
  constexpr size_t kAhead = PrefetchBytes(M);
  const __m256i ones = _mm256_set1_epi16(1);
  // Every loop that touches acc is unrolled, so that it lives in registers.
  __m256 acc[G][R][M];
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h)
#pragma GCC unroll 4
    for (int q = 0; q < R; ++q)
#pragma GCC unroll 4
      for (int r = 0; r < M; ++r) acc[h][q][r] = _mm256_setzero_ps();
  alignas(32) float d[G][R][M][kQ8Span];
  const int spans = (w.blocks + kQ8Span - 1) / kQ8Span;
  for (int s = 0; s < spans; ++s) {
    const int8_t* line[G];
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) {
      line[h] = w.span(gs[h], s);
      if (prefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(line[h] + kAhead), _MM_HINT_T0);
      }
      CombinedScales<M, R>(a, line[h], s, q0, d[h]);
    }
    const int n = std::min(kQ8Span, w.blocks - s * kQ8Span);
    for (int k = 0; k < n; ++k) {
      const size_t off = QuantStride(s * kQ8Span + k);
      __m256i xv[M], ax[M];
#pragma GCC unroll 4
      for (int r = 0; r < M; ++r) {
        xv[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(a.q + r * a.q_stride + off));
        ax[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(a.abs + r * a.q_stride + off));
      }
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h) {
        const int8_t* wb = line[h] + kQ8SpanScaleBytes + k * kQ8Group * kQ8Block;
        if (prefetch) {
          _mm_prefetch(reinterpret_cast<const char*>(wb + kAhead), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(wb + kAhead + 64), _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int q = 0; q < R; ++q) {
          const __m256i wv =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + (q0 + q) * kQ8Block));
#pragma GCC unroll 4
          for (int r = 0; r < M; ++r) {
            const __m256i p16 = _mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(wv, xv[r]));
            const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
            acc[h][q][r] = _mm256_fmadd_ps(p, _mm256_broadcast_ss(&d[h][q][r][k]), acc[h][q][r]);
          }
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < G; ++h) {
    const int j = gs[h] * kQ8Group + q0;
#pragma GCC unroll 4
    for (int q = 0; q < R; ++q) {
      if (j + q >= w.rows) break;  // a padding row
#pragma GCC unroll 4
      for (int r = 0; r < M; ++r) {
        alignas(32) float lanes[kLanes];
        _mm256_store_ps(lanes, acc[h][q][r]);
        const float v = SumLanes(lanes);
        y[static_cast<size_t>(r) * w.rows + j + q] = bias != nullptr ? v + bias[j + q] : v;
      }
    }
  }
}

// Up to 4 input rows at a time: a whole group of W rows for one or two of them, half a group
// for three or four, so that the accumulators (at most 8) and the W vectors fit the 16 AVX
// registers. The second half of a group is read from cache, so only the first prefetches.
// One input row (a decode step) takes two groups at once, from the two halves of the range,
// as two streams: 2 to 6% less time than one group at a time over a decode step's matrices
// (2 threads, side by side).
constexpr int kRowsPerPass = 4;

template <int M, int R>
void PassAvx2(const Activations& a, const Q8Matrix& w, const float* bias, float* y, int g0,
              int g1) {
  static_assert(kQ8Group % R == 0, "a pass reads whole groups");
  if constexpr (M == 1 && R == kQ8Group) {
    const int half = (g1 - g0) / 2;
    for (int i = 0; i < half; ++i) {
      const int gs[2] = {g0 + i, g0 + half + i};
      DotsAvx2<M, R, 2>(a, w, bias, y, gs, 0, true);
    }
    if ((g1 - g0) % 2 == 1) {
      const int gs[1] = {g1 - 1};
      DotsAvx2<M, R, 1>(a, w, bias, y, gs, 0, true);
    }
    return;
  }
  for (int g = g0; g < g1; ++g) {
    const int gs[1] = {g};
    for (int q0 = 0; q0 < kQ8Group; q0 += R) DotsAvx2<M, R, 1>(a, w, bias, y, gs, q0, q0 == 0);
  }
}

// W groups [g0, g1) against the m input rows.
void RangeAvx2(const Activations& a, int m, const Q8Matrix& w, const float* bias, float* y, int g0,
               int g1) {
  using PassFn = void (*)(const Activations&, const Q8Matrix&, const float*, float*, int, int);
  static constexpr PassFn kPasses[] = {PassAvx2<1, 4>, PassAvx2<2, 4>, PassAvx2<3, 2>,
                                       PassAvx2<4, 2>};
  // Every pass of input rows meets W groups [g0, g1) while they stay in cache.
  for (int r0 = 0; r0 < m; r0 += kRowsPerPass) {
    const int rows = std::min(kRowsPerPass, m - r0);
    Activations part = a;
    part.q += r0 * a.q_stride;
    part.abs += r0 * a.q_stride;
    part.s += r0 * a.s_stride;
    kPasses[rows - 1](part, w, bias, y + static_cast<size_t>(r0) * w.rows, g0, g1);
  }
}
#endif  // SCD_Q8_AVX2

// W a task of DecodeLinear takes: kTaskBytes, or for one input row up to kRowTaskBytes while
// the job's `bytes` still give each of `threads` two tasks.
size_t DecodeTaskBytes(int m, size_t bytes, int threads) {
  if (m != 1) return kTaskBytes;
  return std::clamp(bytes / (2 * static_cast<size_t>(std::max(threads, 1))), kTaskBytes,
                    kRowTaskBytes);
}

// One DecodeLinear call: its activations and products, each product's W cut into tasks of
// whole groups of rows, numbered in product order. Captured by one reference, so that the
// std::function the pool takes holds it without allocating.
struct DecodeJob {
  struct Piece {
    size_t first_task, groups, per_task;
  };
  Activations a;
  int m = 0;
  bool scalar = false;  // ActiveIsa() read once: every task runs one variant
  const Q8Product* products = nullptr;
  int count = 0;
  Piece pieces[kQ8MaxProducts];
  size_t tasks = 0;

  void Run(int t) const {
    int i = count - 1;
    while (pieces[i].first_task > static_cast<size_t>(t)) --i;
    const Q8Product& p = products[i];
    const size_t g0 = (t - pieces[i].first_task) * pieces[i].per_task;
    const size_t g1 = std::min(pieces[i].groups, g0 + pieces[i].per_task);
#if SCD_Q8_AVX2
    if (!scalar) {
      return RangeAvx2(a, m, *p.w, p.bias, p.y, static_cast<int>(g0), static_cast<int>(g1));
    }
#endif
    const int j1 = static_cast<int>(std::min<size_t>(p.w->rows, g1 * kQ8Group));
    DotsScalar(a, m, *p.w, p.bias, p.y, static_cast<int>(g0 * kQ8Group), j1);
  }
};

// The decode rows against every product's W, quantized once; each W cut into tasks of whole
// groups of rows (DecodeTaskBytes each), all handed to the pool as one job.
void DecodeLinear(const float* x, const Q8Product* products, int count, int m, int max_threads) {
  DecodeJob job;
  job.a = QuantizeActivations(x, m, products[0].w->cols, products[0].w->blocks);
  job.m = m;
  job.scalar = ActiveIsa() == CpuIsa::kScalar;
  job.products = products;
  job.count = count;
  size_t bytes = 0;
  for (int i = 0; i < count; ++i) bytes += products[i].w->bytes();
  const int cap = static_cast<int>(std::max<size_t>(1, bytes / kBytesPerThread));
  const int threads = max_threads > 0 ? std::min(max_threads, cap) : cap;
  const size_t task_bytes =
      DecodeTaskBytes(m, bytes, std::min(threads, ComputePool::Global().threads()));
  for (int i = 0; i < count; ++i) {
    const Q8Matrix& w = *products[i].w;
    const size_t groups = Groups(w.rows);
    const size_t per_task = std::max<size_t>(1, task_bytes / w.group_bytes);
    job.pieces[i] = DecodeJob::Piece{job.tasks, groups, per_task};
    job.tasks += (groups + per_task - 1) / per_task;
  }
  ComputePool::Global().Run(
      static_cast<int>(job.tasks), [&job](int t) { job.Run(t); }, threads);
}

// F32 activations against W dequantized a chunk of rows at a time into per-thread scratch;
// each chunk's sgemm writes y's columns [j0, j0 + n) (ldc = w.rows).
void PrefillLinear(const float* x, const Q8Matrix& w, const float* bias, float* y, int m,
                   int max_threads) {
  thread_local AlignedArray<float> scratch;
  const size_t cols = w.cols;
  const int chunk = static_cast<int>(std::max<size_t>(1, kScratchFloats / cols));
  if (scratch.size() < std::min<size_t>(chunk, w.rows) * cols) {
    scratch = AlignedArray<float>(std::min<size_t>(chunk, w.rows) * cols);
  }
  // The pool's workers name their own thread_local: they get the caller's buffer by pointer.
  float* const buffer = scratch.data();
  for (int j0 = 0; j0 < w.rows; j0 += chunk) {
    const int n = std::min(chunk, w.rows - j0);
    ForPieces(n, std::max<size_t>(1, kConvertTaskElems / cols), max_threads,
              [&](size_t r0, size_t r1) {
                DequantizeQ8Rows(w, j0 + static_cast<int>(r0), static_cast<int>(r1 - r0),
                                 buffer + r0 * cols);
              });
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, w.cols, 1.0f, x, w.cols, buffer,
                w.cols, 0.0f, y + j0, w.rows);
  }
  if (bias != nullptr) {
    for (int r = 0; r < m; ++r) {
      float* row = y + static_cast<size_t>(r) * w.rows;
      for (int j = 0; j < w.rows; ++j) row[j] += bias[j];
    }
  }
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal: exact
  } else {
    const uint32_t bits = exp == 0x1f ? (0xffu << 23) | (mant << 13)  // inf or NaN
                                      : ((exp - 15 + 127) << 23) | (mant << 13);
    std::memcpy(&mag, &bits, sizeof(mag));
  }
  return sign ? -mag : mag;
}

uint16_t FloatToHalfUp(float f) {
  constexpr uint16_t kMaxHalf = 0x7bff;  // 65504
  if (!(f > 0.0f)) return 0;
  if (f >= 65504.0f) return kMaxHalf;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const int exp = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  // Truncated to a half first, then one step up (the bit patterns of positive halves are in
  // value order) when that fell short.
  uint16_t h = exp <= 0 ? static_cast<uint16_t>(std::ldexp(f, 24))  // subnormal; truncates
                        : static_cast<uint16_t>((exp << 10) | ((bits & 0x7fffff) >> 13));
  if (HalfToFloat(h) < f) ++h;
  return std::min(h, kMaxHalf);
}

size_t Q8MatrixBytes(int rows, int cols) { return Q8Shape(rows, cols).size; }

Q8Matrix QuantizeQ8(const float* w, int rows, int cols) {
  return QuantizeQ8(w, rows, cols,
                    std::make_shared<AlignedArray<int8_t>>(Q8MatrixBytes(rows, cols)), 0);
}

Q8Matrix QuantizeQ8(const float* w, int rows, int cols, std::shared_ptr<AlignedArray<int8_t>> store,
                    size_t offset) {
  Q8Matrix m = Q8Shape(rows, cols);
  const size_t groups = Groups(rows);
  if (store == nullptr || offset % 64 != 0 || offset + m.size > store->size()) {
    throw std::invalid_argument("QuantizeQ8: the store does not hold the matrix at that offset");
  }
  // The store's bytes are zeroed: the padding rows, the scales past a row's end and the last
  // block's tail stay 0.
  m.data = store->data() + offset;
  m.store = std::move(store);
  // Tasks of whole groups, so that no two threads write one cache line.
  const size_t per_task = kConvertTaskElems / std::max(cols, 1) / kQ8Group;
  ForPieces(groups, per_task, 0, [&](size_t g0, size_t g1) {
    const size_t r1 = std::min<size_t>(rows, g1 * kQ8Group);
    for (size_t r = g0 * kQ8Group; r < r1; ++r) {
      const float* wr = w + r * cols;
      for (int b = 0; b < m.blocks; ++b) {
        const int n = std::min(kQ8Block, cols - b * kQ8Block);
        const float* v = wr + static_cast<size_t>(b) * kQ8Block;
        const uint16_t scale = FloatToHalfUp(AbsMax(v, n) / 127.0f);
        const int row = static_cast<int>(r);
        std::memcpy(m.data + m.scale_offset(row, b), &scale, sizeof(scale));
        QuantizeBlock(v, n, HalfToFloat(scale), m.data + m.quants_offset(row, b));
      }
    }
  });
  return m;
}

void DequantizeQ8Rows(const Q8Matrix& m, int row0, int rows, float* out) {
  for (int r = 0; r < rows; ++r) {
    float* o = out + static_cast<size_t>(r) * m.cols;
    for (int b = 0; b < m.blocks; ++b) {
      const int8_t* q = m.block_quants(row0 + r, b);
      const float scale = HalfToFloat(m.block_scale(row0 + r, b));
      const int n = std::min(kQ8Block, m.cols - b * kQ8Block);
      for (int i = 0; i < n; ++i) o[b * kQ8Block + i] = scale * static_cast<float>(q[i]);
    }
  }
}

void Q8Linear(const float* x, const Q8Matrix& w, const float* bias, float* y, int m,
              int max_threads) {
  if (m <= 0 || w.rows <= 0) return;
  if (w.cols <= 0) {  // an empty sum
    for (int r = 0; r < m; ++r) {
      for (int j = 0; j < w.rows; ++j) {
        y[static_cast<size_t>(r) * w.rows + j] = bias != nullptr ? bias[j] : 0.0f;
      }
    }
    return;
  }
  if (m <= kQ8DecodeMaxRows) {
    const Q8Product product{&w, bias, y};
    DecodeLinear(x, &product, 1, m, max_threads);
  } else {
    PrefillLinear(x, w, bias, y, m, max_threads);
  }
}

void Q8LinearMany(const float* x, const Q8Product* products, int count, int m) {
  bool together = m >= 1 && m <= kQ8DecodeMaxRows && count > 1 && count <= kQ8MaxProducts;
  for (int i = 0; i < count && together; ++i) {
    together = products[i].w->rows > 0 && products[i].w->cols > 0 &&
               products[i].w->cols == products[0].w->cols;
  }
  if (!together) {
    for (int i = 0; i < count; ++i) Q8Linear(x, *products[i].w, products[i].bias, products[i].y, m);
    return;
  }
  DecodeLinear(x, products, count, m, 0);
}

}  // namespace scd::cpu
