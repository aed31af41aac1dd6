// SmallBatchLinear: y[M, N] = x[M, K] · W[N, K]ᵀ for the few rows of a decode batch, reading W
// from memory once instead of packing it as a GEMM does.
//
// A decode step is bound by reading the weights. OpenBLAS's sgemv reads W once for one row,
// near the memory's bandwidth; its sgemm, at a few rows, first packs panels of W and costs
// several GEMVs' time (scd-bench small-batch, docs/RESULTS.md, "Runtime"), and one GEMV per
// row reads W once per row. Here each thread streams its share of W's rows in slices of about
// 1 MB; each slice meets every block of up to kSmallBatchBlock input rows while it stays in
// cache, a few W rows at a time in registers against each block (FMA accumulators per (W row,
// input row), summed at the row's end). Row r's result depends only on x[r] and W, in one fixed
// order of sums: never on the other rows, their number or the thread count.
#ifndef SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_H_
#define SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_H_

namespace scd::cpu {

constexpr int kSmallBatchBlock = 4;  // input rows that share the W rows in registers

// y[m, n] = x[m, k] · w[n, k]ᵀ for any m >= 1, on up to `threads` threads including the caller
// (0: one per 2 MB of w, up to the hardware's; at most 16 either way).
void SmallBatchLinear(const float* x, const float* w, float* y, int m, int n, int k,
                      int threads = 0);

// Whether cpu::Linear sends a decode batch's few rows here (the default) or to OpenBLAS as
// before (a GEMV per row up to 4 rows, then sgemm): for benchmarks that compare the two in
// one run. Process-wide.
void SetSmallBatchLinearEnabled(bool enabled);
bool SmallBatchLinearEnabled();

}  // namespace scd::cpu

#endif  // SCD_KERNELS_CPU_SMALL_BATCH_LINEAR_H_
