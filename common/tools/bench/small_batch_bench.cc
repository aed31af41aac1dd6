// See small_batch_bench.h.
#include "common/tools/bench/small_batch_bench.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/random.h"
#include "common/tools/bench/roofline.h"
#include "common/tools/bench/runtime_bench.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/small_batch_linear.h"

namespace scd::bench {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Matrix {
  const char* name;
  int n, k;
};

// One layer of Llama-3-8B (d 4096, 32 / 8 heads of 128, FFN 14336) in our fused layout.
constexpr Matrix kMatrices[] = {
    {"wqkv", 6144, 4096}, {"wo", 4096, 4096}, {"w_gate_up", 28672, 4096}, {"w_down", 4096, 14336}};

}  // namespace

absl::StatusOr<SmallBatchBenchReport> RunSmallBatchBench(const SmallBatchBenchOptions& options) {
  if (options.rows.empty() || options.reps < 1 || options.shrink < 1 || options.pause_ms < 0) {
    return absl::InvalidArgumentError(
        "small-batch bench needs rows, reps >= 1, shrink >= 1 and pause_ms >= 0");
  }
  const int most = *std::max_element(options.rows.begin(), options.rows.end());
  if (*std::min_element(options.rows.begin(), options.rows.end()) < 1 || most > 64) {
    return absl::InvalidArgumentError("small-batch rows must be in [1, 64]");
  }
  SmallBatchBenchReport report;
  report.options = options;
  report.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  const int threads = std::max(1, report.hardware_threads);
  report.memcpy_gbps = std::max(MeasureMemcpy(size_t{1} << 30, 1, 3).gbps,
                                MeasureMemcpy(size_t{1} << 30, threads, 3).gbps);
  for (Matrix mat : kMatrices) {
    mat.n = std::max(1, mat.n / options.shrink);
    mat.k = std::max(1, mat.k / options.shrink);
    if (options.progress) {
      options.progress(absl::StrCat(mat.name, " [", mat.n, ", ", mat.k, "]"));
    }
    std::vector<float> w(static_cast<size_t>(mat.n) * mat.k);
    std::vector<float> x(static_cast<size_t>(most) * mat.k), y(static_cast<size_t>(most) * mat.n);
    FillNormal(w.data(), w.size(), 1, 0.0f, 0.02f);
    FillNormal(x.data(), x.size(), 2, 0.0f, 1.0f);
    for (int m : options.rows) {
      SmallBatchMeasurement r{mat.name, mat.n, mat.k, m};
      r.gemv_ms = r.sgemm_ms = r.small_ms = r.linear_ms = 1e30;
      // OpenBLAS's workers spin for a while after each call before they sleep, and would run
      // beside whichever call comes next (SmallBatchLinear's threads too). In a decode step
      // of SmallBatchLinear calls they are asleep, so each call here starts after a pause.
      auto pause = [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(options.pause_ms));
      };
      for (int rep = 0; rep <= options.reps; ++rep) {  // the first round warms up
        pause();
        auto t0 = Clock::now();
        for (int i = 0; i < m; ++i) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, mat.n, mat.k, 1.0f, w.data(), mat.k,
                      x.data() + static_cast<size_t>(i) * mat.k, 1, 0.0f,
                      y.data() + static_cast<size_t>(i) * mat.n, 1);
        }
        const double gemv = MsSince(t0);
        pause();
        t0 = Clock::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, mat.n, mat.k, 1.0f, x.data(), mat.k,
                    w.data(), mat.k, 0.0f, y.data(), mat.n);
        const double sgemm = MsSince(t0);
        pause();
        t0 = Clock::now();
        cpu::SmallBatchLinear(x.data(), w.data(), y.data(), m, mat.n, mat.k);
        const double small = MsSince(t0);
        pause();
        t0 = Clock::now();
        cpu::Linear(x.data(), w.data(), nullptr, y.data(), m, mat.n, mat.k);
        const double linear = MsSince(t0);
        if (rep == 0) continue;
        r.gemv_ms = std::min(r.gemv_ms, gemv);
        r.sgemm_ms = std::min(r.sgemm_ms, sgemm);
        r.small_ms = std::min(r.small_ms, small);
        r.linear_ms = std::min(r.linear_ms, linear);
      }
      report.results.push_back(r);
    }
  }
  return report;
}

std::string FormatSmallBatchBenchReport(const SmallBatchBenchReport& report,
                                        const std::string& command) {
  std::string out = absl::StrCat(
      "SCD-Serve small-batch GEMM benchmark (CPU)\ncommand: ", command,
      "\nhost: ", report.hardware_threads, " hardware threads; memcpy ",
      absl::StrFormat("%.1f", report.memcpy_gbps), " GB/s (read + write); best of ",
      report.options.reps, " after a warm-up, interleaved\n\n",
      "| matrix [N, K] | rows | GEMV per row (ms) | sgemm (ms) | SmallBatchLinear (ms) | "
      "Linear (ms) | Linear vs the better of GEMV and sgemm | W's bytes / Linear's time, GB/s (/ "
      "memcpy) |\n"
      "|---|---|---|---|---|---|---|---|\n");
  std::vector<double> speedup_at_8, stream_at_8;
  for (const SmallBatchMeasurement& r : report.results) {
    const double other = std::min(r.gemv_ms, r.sgemm_ms);
    const double gbps = 4.0 * r.n * r.k / (r.linear_ms * 1e6);  // W's bytes, read once
    absl::StrAppend(
        &out, absl::StrFormat("| %s [%d, %d] | %d | %.2f | %.2f | %.2f | %.2f | %.2fx | "
                              "%.1f (%.2f) |\n",
                              r.matrix, r.n, r.k, r.m, r.gemv_ms, r.sgemm_ms, r.small_ms,
                              r.linear_ms, other / r.linear_ms, gbps, gbps / report.memcpy_gbps));
    if (r.m == 8) {
      speedup_at_8.push_back(other / r.linear_ms);
      stream_at_8.push_back(gbps / report.memcpy_gbps);
    }
  }
  if (!speedup_at_8.empty()) {
    absl::StrAppend(&out, absl::StrFormat("\nlinear_vs_best_other_at_8=%.2f "
                                          "linear_stream_vs_memcpy_at_8=%.2f (medians over the "
                                          "matrices)\n",
                                          Median(speedup_at_8), Median(stream_at_8)));
  }
  return out;
}

}  // namespace scd::bench
