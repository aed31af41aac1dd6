// Small-batch GEMM benchmark (`scd-bench small-batch`): the CPU matrix products of a decode
// batch of a few rows, y[M, N] = x[M, K] · W[N, K]ᵀ, on the Llama-3-8B layer's matrices, three
// ways side by side in one run: a GEMV per row (OpenBLAS sgemv; reads W M times), one OpenBLAS
// sgemm (packs W first), and SmallBatchLinear (kernels/cpu/small_batch_linear.h; reads W once
// per 8 rows). cpu::Linear picks among them; the report gives its time too, the W bytes it
// streams per second against memcpy's GB/s measured in the same run (read + write, as in
// roofline.h), and its speed-up over the better of the other two. Each call starts after a
// pause (200 ms by default), so that none runs beside OpenBLAS's workers still spinning from the
// call before it (in a decode step of SmallBatchLinear calls they sleep).
#ifndef SCD_COMMON_TOOLS_BENCH_SMALL_BATCH_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_SMALL_BATCH_BENCH_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace scd::bench {

struct SmallBatchBenchOptions {
  std::vector<int> rows = {1, 2, 4, 8, 16, 32, 64};
  int reps = 9;        // each way timed this many times, interleaved; the best counts
  int shrink = 1;      // each matrix's N and K divided by this (tests run it small)
  int pause_ms = 200;  // before each timed call (see above)
  std::function<void(const std::string&)> progress;  // one line per shape; may be empty
};

struct SmallBatchMeasurement {
  std::string matrix;  // "wqkv", "wo", "w_gate_up", "w_down"
  int n = 0, k = 0, m = 0;
  double gemv_ms = 0, sgemm_ms = 0, small_ms = 0, linear_ms = 0;
};

struct SmallBatchBenchReport {
  SmallBatchBenchOptions options;
  int hardware_threads = 0;
  double memcpy_gbps = 0;  // read + write
  std::vector<SmallBatchMeasurement> results;
};

absl::StatusOr<SmallBatchBenchReport> RunSmallBatchBench(const SmallBatchBenchOptions& options);

// A Markdown table per matrix and the summary line
// `linear_vs_best_other_at_8=<ratio> linear_stream_vs_memcpy_at_8=<ratio>` (medians over the
// matrices).
std::string FormatSmallBatchBenchReport(const SmallBatchBenchReport& report,
                                        const std::string& command);

}  // namespace scd::bench

#endif  // SCD_COMMON_TOOLS_BENCH_SMALL_BATCH_BENCH_H_
