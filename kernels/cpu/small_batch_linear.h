// SmallBatchLinear: y[M, N] = x[M, K] · W[N, K]ᵀ for the few rows of a decode step (one row
// alone, or a batch of up to kSmallBatchMaxRows), reading W from memory once.
//
// A decode step is bound by reading the weights: each projection is a GEMV or a handful of
// them. OpenBLAS's sgemm, at a few rows, first packs panels of W and costs several GEMVs' time,
// and one sgemv per row reads W once per row (scd-bench small-batch). Here W's rows are cut
// into tasks of about kTaskBytes that the process's ComputePool hands out to its threads (the
// caller included; no thread is started per call), and each task meets every block of up to 4
// input rows while its slice of W stays in cache, a few W rows at a time in registers against
// each block. A matrix too small to pay for waking a second thread runs on the caller alone.
//
// Row r's result depends only on x[r] and W, in one fixed order of sums: never on the other
// rows, their number, or the thread count. The order (small_batch_linear_kernel.h): per
// (W row, input row), L lane partial sums by fused multiply-add over the first K / L · L
// elements, the lanes added in order, then the tail with fused multiply-adds. So a sequence
// decoded alone gets bit for bit what it gets in a batch.
//
// Variants, chosen by ActiveIsa() (cpu_isa.h) at each call:
//   kScalar  plain loops with L = 8: the reference twin, bit for bit the AVX2 variant.
//   kAvx2    AVX2+FMA intrinsics, L = 8.
//   kAvx512  the AVX2 variant's source compiled for AVX-512F/BW/VL with 16-float vectors,
//            L = 16: it runs only where the CPU has AVX-512 (DetectedIsa), and its sums group
//            the lanes differently, so it agrees with the other two to rounding (about 1e-6
//            relative), not bit for bit. Row independence holds within it as in the others.
#ifndef SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_H_
#define SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_H_

namespace scd::cpu {

// Most rows cpu::Linear sends here; more take OpenBLAS's sgemm (prefill).
constexpr int kSmallBatchMaxRows = 16;

// y[m, n] = x[m, k] · w[n, k]ᵀ for any m >= 1 (n, k >= 0). threads = 0: the global
// ComputePool's threads, or the caller alone for a small matrix; threads > 0: at most that many
// (the caller included), whatever the size, for tests and benchmarks. Results are the same for
// every thread count.
void SmallBatchLinear(const float* x, const float* w, float* y, int m, int n, int k,
                      int threads = 0);

// Whether cpu::Linear sends 1 to kSmallBatchMaxRows rows here (the default) or to OpenBLAS as
// before (sgemv per row up to 4 rows, then sgemm): for benchmarks that compare the two in one
// run. Process-wide.
void SetSmallBatchLinearEnabled(bool enabled);
bool SmallBatchLinearEnabled();

}  // namespace scd::cpu

#endif  // SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_H_
