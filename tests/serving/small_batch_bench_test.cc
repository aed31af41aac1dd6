// scd-bench small-batch's logic (common/tools/bench/small_batch_bench.h) and the runtime
// benchmark's batched decode (common/tools/bench/runtime_bench.h), at toy sizes: every way of every
// matrix and row count is timed, cpu::Linear's answer agrees with the three ways' dispatch, and the
// reports carry the figures. Timings are only reported, never asserted (this machine is noisy).
#include "common/tools/bench/small_batch_bench.h"

#include <catch2/catch.hpp>

#include "absl/strings/str_format.h"
#include "common/tools/bench/runtime_bench.h"
#include "kernels/cpu/small_batch_linear.h"

namespace scd::bench {

TEST_CASE("The small-batch benchmark times each way at each row count", "[cpu]") {
  SmallBatchBenchOptions o;
  o.rows = {1, 3, 8};
  o.reps = 1;
  o.shrink = 16;  // [384, 256], [256, 256], [1792, 256], [256, 896]
  o.pause_ms = 0;
  const absl::StatusOr<SmallBatchBenchReport> r = RunSmallBatchBench(o);
  INFO(r.status());
  REQUIRE(r.ok());
  REQUIRE(r->results.size() == 12);
  CHECK(r->memcpy_gbps > 0);
  for (const SmallBatchMeasurement& m : r->results) {
    INFO(m.matrix << " rows " << m.m);
    CHECK(m.gemv_ms > 0);
    CHECK(m.sgemm_ms > 0);
    CHECK(m.small_ms > 0);
    CHECK(m.linear_ms > 0);
  }
  CHECK(r->results[9].matrix == "w_down");
  CHECK(r->results[9].n == 256);
  CHECK(r->results[9].k == 896);
  const std::string md = FormatSmallBatchBenchReport(*r, "scd-bench small-batch");
  CHECK(md.find("| w_gate_up [1792, 256] | 8 |") != std::string::npos);
  CHECK(md.find("linear_vs_best_other_at_8=") != std::string::npos);
  o.rows = {0};
  CHECK(RunSmallBatchBench(o).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("The runtime benchmark decodes batches after the single sequence", "[cpu]") {
  RuntimeBenchOptions o;
  o.shape = "stories260K";
  o.prefill_tokens = 32;
  o.prefill_reps = 1;
  o.decode_context = 16;
  o.decode_steps = 3;
  o.decode_batches = {2, 5};
  o.memcpy_bytes = size_t{1} << 20;
  o.memcpy_reps = 1;
  o.sgemm_reps = 1;
  const absl::StatusOr<RuntimeBenchReport> r = RunRuntimeBench(o);
  INFO(r.status());
  REQUIRE(r.ok());
  REQUIRE(r->batched_decode.size() == 2);
  for (const RuntimeBenchReport::BatchedDecode& d : r->batched_decode) {
    CHECK(d.median_seconds > 0);
    CHECK(d.tokens_per_second == Approx(d.batch / d.median_seconds));
    CHECK(d.vs_batch_1 == Approx(d.tokens_per_second * r->decode_median_seconds));
    CHECK(d.openblas_tokens_per_second == Approx(d.batch / d.openblas_median_seconds));
  }
  CHECK(cpu::SmallBatchLinearEnabled());  // switched back on after the comparison
  // The read-only ceiling is measured at the memcpy's thread counts, and the ratios come from
  // the figures they name.
  REQUIRE(r->reads.size() == r->memcpy.size());
  for (size_t i = 0; i < r->reads.size(); ++i) {
    CHECK(r->reads[i].threads == r->memcpy[i].threads);
    CHECK(r->reads[i].gbps == Approx(r->reads[i].bytes / r->reads[i].best_seconds / 1e9));
    CHECK(r->reads[i].gbps <= r->read_gbps);
  }
  CHECK(r->decode_vs_read == Approx(r->decode_gbps / r->read_gbps));
  CHECK(r->read_vs_memcpy == Approx(r->read_gbps / r->memcpy_gbps));
  // One pass over the step's matrices beside every timed step.
  REQUIRE(r->matrices_seconds.size() == r->decode_step_seconds.size());
  CHECK(r->matrices_median_seconds == Approx(Median(r->matrices_seconds)));
  CHECK(r->matrices_gbps == Approx(r->decode_bytes / r->matrices_median_seconds / 1e9));
  CHECK(r->step_vs_matrices == Approx(r->matrices_median_seconds / r->decode_median_seconds));
  const std::string text = FormatRuntimeBenchReport(*r, "scd-bench runtime");
  CHECK(text.find("batch   5: step") != std::string::npos);
  CHECK(text.find("prefill_vs_sgemm=") != std::string::npos);
  CHECK(text.find(absl::StrFormat(" decode_vs_read=%.3f ", r->decode_vs_read)) !=
        std::string::npos);
  CHECK(text.find(absl::StrFormat("the step runs at %.1f%% of their speed",
                                  100 * r->step_vs_matrices)) != std::string::npos);
  o.decode_batches = {0};
  CHECK(RunRuntimeBench(o).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace scd::bench
