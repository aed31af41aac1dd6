// See small_batch_linear.h. The AVX-512 variant lives in small_batch_linear_avx512.cc.
#include "kernels/cpu/small_batch_linear.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/small_batch_linear_kernel.h"

namespace scd::cpu {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SCD_SMALL_BATCH_AVX512 1
// Defined in small_batch_linear_avx512.cc, under the same condition.
void SmallBatchRangeAvx512(const float* x, const float* w, float* y, int m, int n, int k, int j0,
                           int j1);
#endif

namespace {

// W a task takes at a time: small enough that its slice stays in L2 while up to four blocks of
// input rows pass over it, and that two threads share a matrix evenly; large enough that
// handing out tasks costs nothing beside reading them. 32 KB to 256 KB timed alike on a
// stories110M decode step's projections within the host's noise; 128 KB is the middle.
constexpr size_t kTaskBytes = size_t{128} << 10;
// Below this much W (times the passes of blocks of input rows) a call runs on the caller
// alone: on one 2-core host, a second thread began to pay at 128 KB of W for one row and
// at 64 KB for four (one call per matrix of many, so W came from memory).
constexpr size_t kMinParallelBytes = size_t{128} << 10;

// The scalar twin: plain loops in the order of small_batch_linear_kernel.h, 8 lanes.
void RangeScalar(const float* x, const float* w, float* y, int m, int n, int k, int j0, int j1) {
  constexpr int kLanes = 8;
  const int body = k / kLanes * kLanes;
  for (int j = j0; j < j1; ++j) {
    const float* wr = w + static_cast<size_t>(j) * k;
    for (int r = 0; r < m; ++r) {
      const float* xr = x + static_cast<size_t>(r) * k;
      float lanes[kLanes] = {};
      for (int i = 0; i < body; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) lanes[l] = std::fma(wr[i + l], xr[i + l], lanes[l]);
      }
      y[static_cast<size_t>(r) * n + j] = FinishDot<kLanes>(lanes, wr, xr, body, k);
    }
  }
}

#if defined(__AVX2__) && defined(__FMA__)
struct Avx2Vec {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  // W rows in registers per block of 1..4 input rows: M·R accumulators, R W vectors and an
  // input vector within the 16 registers. Four input rows against three W rows took 20 to 25%
  // less time than against two at 4 to 16 rows (a stories110M decode step's projections, one
  // thread). One row is bound by memory, and reads it faster the more W rows stream at once:
  // twelve rows (the FMAs take W from memory, so 12 accumulators and the input fit) took 8 to
  // 12% less time than four over a decode step's matrices mapped from a checkpoint (4 KB page
  // cache pages, whose rows the hardware prefetcher follows only within a page), 2 threads.
  static constexpr int kWRows[4] = {12, 4, 3, 3};
  static Reg Zero() { return _mm256_setzero_ps(); }
  static Reg Load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg Fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static void Store(float* p, Reg v) { _mm256_store_ps(p, v); }
};

void RangeAvx2(const float* x, const float* w, float* y, int m, int n, int k, int j0, int j1) {
  DotRange<Avx2Vec>(x, w, y, m, n, k, j0, j1);
}
#else
void RangeAvx2(const float* x, const float* w, float* y, int m, int n, int k, int j0, int j1) {
  RangeScalar(x, w, y, m, n, k, j0, j1);
}
#endif

using RangeFn = void (*)(const float*, const float*, float*, int, int, int, int, int);

RangeFn RangeFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return RangeScalar;
    case CpuIsa::kAvx2:
      return RangeAvx2;
    case CpuIsa::kAvx512:
#if SCD_SMALL_BATCH_AVX512
      return SmallBatchRangeAvx512;
#else
      return RangeAvx2;
#endif
  }
  return RangeScalar;
}

// One call's arguments, captured by a single reference so that the std::function the pool
// takes holds it without allocating.
struct Job {
  RangeFn range;
  const float* x;
  const float* w;
  float* y;
  int m, n, k;
  int rows_per_task;
};

std::atomic<bool> enabled{true};

}  // namespace

void SetSmallBatchLinearEnabled(bool on) { enabled.store(on, std::memory_order_relaxed); }

bool SmallBatchLinearEnabled() { return enabled.load(std::memory_order_relaxed); }

void SmallBatchLinear(const float* x, const float* w, float* y, int m, int n, int k, int threads) {
  if (m <= 0 || n <= 0) return;
  const RangeFn range = RangeFor(ActiveIsa());  // read once: every task runs one variant
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(std::max(k, 1));
  // Whole register blocks of W rows per task (a multiple of 3, 4 and 12), at least one block.
  const int rows_per_task =
      static_cast<int>(std::max<size_t>(12, kTaskBytes / row_bytes / 12 * 12));
  const int tasks = (n + rows_per_task - 1) / rows_per_task;
  int cap = threads;
  if (cap <= 0) {
    const size_t passes = static_cast<size_t>((m + kInputBlock - 1) / kInputBlock);
    cap = row_bytes * static_cast<size_t>(n) * passes < kMinParallelBytes ? 1 : 0;
  }
  if (tasks == 1 || cap == 1) return range(x, w, y, m, n, k, 0, n);
  const Job job{range, x, w, y, m, n, k, rows_per_task};
  ComputePool::Global().Run(
      tasks,
      [&job](int t) {
        const int j0 = t * job.rows_per_task;
        job.range(job.x, job.w, job.y, job.m, job.n, job.k, j0,
                  std::min(job.n, j0 + job.rows_per_task));
      },
      cap);
}

}  // namespace scd::cpu
