// Roofline ceilings of the host, measured rather than taken from a data sheet, so that the
// runtime benchmark can state its results as fractions of what this machine does in the same
// run:
//   - compute: OpenBLAS cblas_sgemm GFLOP/s, counting 2·M·N·K flops per C[M,N] = A[M,K]·B[N,K]ᵀ
//     (the layout our Linear uses), best of `reps` after one warm-up call;
//   - memory: memcpy GB/s, counting 2·bytes per copy (each byte is read once and written once:
//     the STREAM "Copy" convention). glibc copies buffers this large with non-temporal stores,
//     so there is no read-for-ownership and 2·bytes is the real DRAM traffic;
//   - reads alone: GB/s of a stream that only reads (a float sum, 32 lanes in flight), counting
//     bytes once. A decode step only reads its weights, so this is the ceiling it meets first.
//     Under a hypervisor a read stream can fall well short of memcpy's 2·bytes, whose writes
//     travel a separate path (docs/RESULTS.md, Runtime).
#ifndef SCD_COMMON_TOOLS_BENCH_ROOFLINE_H_
#define SCD_COMMON_TOOLS_BENCH_ROOFLINE_H_

#include <cstddef>
#include <cstdint>

namespace scd::bench {

struct SgemmMeasurement {
  int m = 0, n = 0, k = 0;
  double best_seconds = 0;
  double gflops = 0;  // 2·m·n·k / best_seconds / 1e9
};

// Times cblas_sgemm(RowMajor, NoTrans, Trans, m, n, k) on random data with OpenBLAS's
// default thread count (the one the CPU backend runs with).
SgemmMeasurement MeasureSgemm(int m, int n, int k, int reps, uint64_t seed);

struct MemcpyMeasurement {
  size_t bytes = 0;  // size of one copy
  int threads = 0;   // the copy is split into this many contiguous chunks, one per thread
  double best_seconds = 0;
  double gbps = 0;  // 2·bytes / best_seconds / 1e9 (read + write)
};

// Copies `bytes` from one buffer to another `reps` times (pages touched first) and keeps the
// fastest copy.
MemcpyMeasurement MeasureMemcpy(size_t bytes, int threads, int reps);

struct ReadMeasurement {
  size_t bytes = 0;  // size of the buffer read
  int threads = 0;   // the buffer is split into this many contiguous chunks, one per thread
  double best_seconds = 0;
  double gbps = 0;  // bytes / best_seconds / 1e9 (read only)
};

// Reads `bytes` (touched first) `reps` times and keeps the fastest read.
ReadMeasurement MeasureRead(size_t bytes, int threads, int reps);

}  // namespace scd::bench

#endif  // SCD_COMMON_TOOLS_BENCH_ROOFLINE_H_
