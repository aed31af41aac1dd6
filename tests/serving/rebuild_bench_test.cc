// scd-bench rebuild's logic (common/tools/bench/rebuild_bench.h): every mode at every block size
// rebuilds the whole payload, cut as the codec says (recompute whole; KIVI keys at their
// group), and the report's table and summary line carry each run. Timings are only reported,
// never asserted (this machine is noisy).
#include "common/tools/bench/rebuild_bench.h"

#include <catch2/catch.hpp>

namespace scd::bench {

TEST_CASE("The rebuild benchmark rebuilds each mode whole and in the codec's blocks", "[cpu]") {
  RebuildBenchOptions o;
  o.shape = "stories260K";
  o.rows = 200;
  o.modes = {"raw", "quant4", "recompute", "scd"};
  o.blocks = {kWholeBlock, 0, 48};
  o.reps = 2;
  const absl::StatusOr<RebuildBenchReport> r = RunRebuildBench(o);
  INFO(r.status());
  REQUIRE(r.ok());
  REQUIRE(r->runs.size() == 12);
  struct Want {
    size_t block_rows, blocks;
  };
  // stories260K's default block (8 MiB of K/V at 1280 bytes a row) is past 200 rows: whole.
  // 48 rows cut raw and scd in 5 (4 x 48 + 8); KIVI keys at 32, so 32 rows in 7 (6 x 32 + 8).
  const Want want[12] = {{200, 1}, {200, 1}, {48, 5},  {200, 1}, {200, 1}, {32, 7},
                         {200, 1}, {200, 1}, {200, 1}, {200, 1}, {200, 1}, {48, 5}};
  for (size_t i = 0; i < r->runs.size(); ++i) {
    const RebuildBenchRun& run = r->runs[i];
    INFO(run.mode << " block " << run.block);
    CHECK(run.block == o.blocks[i % 3]);
    CHECK(run.block_rows == want[i].block_rows);
    CHECK(run.blocks == want[i].blocks);
    CHECK(run.ms > 0);
    CHECK(run.min_ms <= run.ms);
    CHECK(run.buffer_mib == Approx(run.block_rows * 1280.0 / (1 << 20)));
  }
  const std::string md = FormatRebuildBenchReport(*r, "scd-bench rebuild");
  CHECK(md.find("| raw | whole | 200 | 1 |") != std::string::npos);
  CHECK(md.find("| quant4 | 48 | 32 | 7 |") != std::string::npos);
  CHECK(md.find("| recompute | 48 | 200 | 1 |") != std::string::npos);
  CHECK(md.find("host_rebuild_vs_whole raw=") != std::string::npos);
  CHECK(md.find(" scd=") != std::string::npos);

  RebuildBenchOptions oracle = o;
  oracle.modes = {"oracle"};  // nothing to rebuild
  CHECK(RunRebuildBench(oracle).status().code() == absl::StatusCode::kInvalidArgument);
  RebuildBenchOptions too_long = o;
  too_long.rows = 513;  // stories260K's context is 512
  CHECK(RunRebuildBench(too_long).status().code() == absl::StatusCode::kInvalidArgument);
  RebuildBenchOptions negative = o;
  negative.blocks = {-2};
  CHECK(RunRebuildBench(negative).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace scd::bench
