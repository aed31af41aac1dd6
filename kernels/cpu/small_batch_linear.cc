// See small_batch_linear.h.
#include "kernels/cpu/small_batch_linear.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace scd::cpu {
namespace {

constexpr int kLanes = 8;                       // floats per accumulator
constexpr size_t kTaskBytes = size_t{1} << 20;  // W a thread takes at a time (stays in cache)
constexpr int kMaxThreads = 16;
constexpr size_t kBytesPerThread = size_t{2} << 20;

// The dot products of M input rows at x (stride k) with W rows [j0, j1), into y (stride n),
// R W rows at a time: each 8 floats of the input rows are loaded once for R W rows, and
// M·R accumulators (at most 8) keep the FMAs independent. Each (W row, input row) pair has its
// own accumulator of kLanes partial sums, run over k in order, then added up in lane order,
// then the tail: the same order whatever M, R or the rows beside it.
template <int M, int R>
void Block(const float* x, const float* w, float* y, int n, int k, int j0, int j1) {
  const int body = k / kLanes * kLanes;
  alignas(32) float lanes[R][M][kLanes];
  auto finish = [&](int j, int rows) {  // rows of W from j, their lanes summed, plus the tail
    for (int q = 0; q < rows; ++q) {
      const float* wr = w + static_cast<size_t>(j + q) * k;
      for (int r = 0; r < M; ++r) {
        float s = 0.0f;
        for (int l = 0; l < kLanes; ++l) s += lanes[q][r][l];
        const float* xr = x + static_cast<size_t>(r) * k;
        for (int i = body; i < k; ++i) s += wr[i] * xr[i];
        y[static_cast<size_t>(r) * n + j + q] = s;
      }
    }
  };
  int j = j0;
  for (; j + R <= j1; j += R) {
    const float* w0 = w + static_cast<size_t>(j) * k;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc[R][M];
    for (int q = 0; q < R; ++q)
      for (int r = 0; r < M; ++r) acc[q][r] = _mm256_setzero_ps();
    // Fully unrolled, so that the accumulators live in registers.
    for (int i = 0; i < body; i += kLanes) {
      __m256 wv[R];
#pragma GCC unroll 8
      for (int q = 0; q < R; ++q) wv[q] = _mm256_loadu_ps(w0 + static_cast<size_t>(q) * k + i);
#pragma GCC unroll 8
      for (int r = 0; r < M; ++r) {
        const __m256 xv = _mm256_loadu_ps(x + static_cast<size_t>(r) * k + i);
#pragma GCC unroll 8
        for (int q = 0; q < R; ++q) acc[q][r] = _mm256_fmadd_ps(wv[q], xv, acc[q][r]);
      }
    }
    for (int q = 0; q < R; ++q)
      for (int r = 0; r < M; ++r) _mm256_store_ps(lanes[q][r], acc[q][r]);
#else
    for (int q = 0; q < R; ++q)
      for (int r = 0; r < M; ++r) std::fill(lanes[q][r], lanes[q][r] + kLanes, 0.0f);
    for (int i = 0; i < body; i += kLanes) {
      for (int q = 0; q < R; ++q) {
        const float* wr = w0 + static_cast<size_t>(q) * k + i;
        for (int r = 0; r < M; ++r) {
          const float* xr = x + static_cast<size_t>(r) * k + i;
          for (int l = 0; l < kLanes; ++l) lanes[q][r][l] += wr[l] * xr[l];
        }
      }
    }
#endif
    finish(j, R);
  }
  for (; j < j1; ++j) Block<M, 1>(x, w, y, n, k, j, j + 1);  // the last < R: same sums
}

using BlockFn = void (*)(const float*, const float*, float*, int, int, int, int);

// Up to kSmallBatchBlock input rows: four W rows at a time for one or two of them, two for
// three or four (at most 8 accumulators, the W vectors and an input vector: at most 13 of the
// 16 AVX registers). For two input rows, four W rows at a time took 10 to 30% less time than
// two (scd-bench small-batch --rows 2, each setting a run of its own).
BlockFn BlockFor(int rows) {
  static constexpr BlockFn kBlocks[] = {Block<1, 4>, Block<2, 4>, Block<3, 2>, Block<4, 2>};
  static_assert(sizeof(kBlocks) / sizeof(kBlocks[0]) == kSmallBatchBlock);
  return kBlocks[rows - 1];
}

// Every block of input rows over W rows [j0, j1): those W rows stay in cache between blocks,
// so W comes from memory once whatever the number of input rows.
void Range(const float* x, const float* w, float* y, int m, int n, int k, int j0, int j1) {
  for (int r0 = 0; r0 < m; r0 += kSmallBatchBlock) {
    const int rows = std::min(kSmallBatchBlock, m - r0);
    BlockFor(rows)(x + static_cast<size_t>(r0) * k, w, y + static_cast<size_t>(r0) * n, n, k, j0,
                   j1);
  }
}

std::atomic<bool> enabled{true};

}  // namespace

void SetSmallBatchLinearEnabled(bool on) { enabled.store(on, std::memory_order_relaxed); }

bool SmallBatchLinearEnabled() { return enabled.load(std::memory_order_relaxed); }

void SmallBatchLinear(const float* x, const float* w, float* y, int m, int n, int k,
                      int threads) {
  if (m <= 0 || n <= 0) return;
  const int per_task = static_cast<int>(
      std::max<size_t>(4, kTaskBytes / (sizeof(float) * static_cast<size_t>(std::max(k, 1)))));
  const int tasks = (n + per_task - 1) / per_task;
  int t = threads;
  if (t <= 0) {
    // A thread is started for every call (tens of microseconds): one per kBytesPerThread of W
    // at most, so that the start stays small beside the time to read its share.
    const size_t bytes = sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(k);
    t = std::min(static_cast<int>(std::thread::hardware_concurrency()),
                 static_cast<int>(std::max<size_t>(1, bytes / kBytesPerThread)));
  }
  t = std::max(1, std::min({t, kMaxThreads, tasks}));
  // Contiguous shares of W's rows, one per thread: each streams its share once, a task at a
  // time.
  auto share = [&](int i) {
    const int begin = static_cast<int>(static_cast<long>(tasks) * i / t) * per_task;
    const int end =
        std::min(n, static_cast<int>(static_cast<long>(tasks) * (i + 1) / t) * per_task);
    for (int j0 = begin; j0 < end; j0 += per_task) {
      Range(x, w, y, m, n, k, j0, std::min(end, j0 + per_task));
    }
  };
  std::vector<std::thread> others;
  others.reserve(t - 1);
  int started = 1;  // shares with a thread of their own (share 0 is the caller's)
  for (; started < t; ++started) {
    try {
      others.emplace_back(share, started);
    } catch (const std::system_error&) {  // no thread to be had: the caller does the rest
      break;
    }
  }
  share(0);
  for (int i = started; i < t; ++i) share(i);
  for (std::thread& th : others) th.join();
}

}  // namespace scd::cpu
