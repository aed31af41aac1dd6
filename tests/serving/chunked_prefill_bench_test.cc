// scd-bench chunked-prefill's logic (common/tools/bench/chunked_prefill_bench.h) on the plain and
// the SEKV path, and with a payload: every chunk size gives the long prompt the same first token,
// the engine prefills (or rebuilds) it in as many pieces as the chunk size says, and the
// report's table and summary line carry each run. Timings are only reported, never asserted (this
// machine is noisy).
#include "common/tools/bench/chunked_prefill_bench.h"

#include <catch2/catch.hpp>

namespace scd::bench {

TEST_CASE("The chunked-prefill benchmark runs both engine paths and reports each chunk size",
          "[cpu]") {
  for (const double budget : {0.0, 0.4}) {
    INFO("sekv budget " << budget);
    ChunkedPrefillBenchOptions o;
    o.shape = "stories260K";
    o.streams = 2;
    o.prompt_tokens = 200;
    o.chunks = {0, 16};
    o.sekv_budget = budget;
    const absl::StatusOr<ChunkedPrefillBenchReport> r = RunChunkedPrefillBench(o);
    REQUIRE(r.ok());
    REQUIRE(r->runs.size() == 2);
    CHECK(r->same_first_token);
    CHECK(r->runs[0].prefill_chunks == 1);
    // 200 prompt tokens on the plain path; the SEKV path prefills all but the last (199),
    // which it decodes through the hierarchy. Chunks of 16 take 13 prefills either way.
    CHECK(r->runs[1].prefill_chunks == 13);
    for (const ChunkedPrefillRun& run : r->runs) {
      CHECK(run.ttft_ms > 0);
      CHECK(run.itl_ms > 0);
    }
    const std::string md = FormatChunkedPrefillBenchReport(*r, "scd-bench chunked-prefill");
    CHECK(md.find("| 16 | 13 |") != std::string::npos);
    CHECK(md.find("chunked_prefill_stall_vs_whole=") != std::string::npos);
    CHECK((md.find("SEKV path") != std::string::npos) == (budget > 0));
  }
  // A long scd payload (an artifact fitted on the spot) rebuilt whole, then in chunks of 16.
  ChunkedPrefillBenchOptions o;
  o.shape = "stories260K";
  o.streams = 2;
  o.prompt_tokens = 200;
  o.payload = "scd";
  o.chunks = {0, 16};
  const absl::StatusOr<ChunkedPrefillBenchReport> r = RunChunkedPrefillBench(o);
  INFO(r.status());
  REQUIRE(r.ok());
  REQUIRE(r->runs.size() == 2);
  CHECK(r->same_first_token);
  // 184 payload rows: one rebuild, or 12 of at most 16; the 16 suffix tokens in one prefill.
  CHECK(r->runs[0].rebuild_chunks == 1);
  CHECK(r->runs[1].rebuild_chunks == 12);
  CHECK(r->runs[1].prefill_chunks == 1);
  const std::string md = FormatChunkedPrefillBenchReport(*r, "scd-bench chunked-prefill");
  CHECK(md.find("| rebuild_chunk | rebuilds |") != std::string::npos);
  CHECK(md.find("184 tokens as a payload in mode scd") != std::string::npos);
  CHECK(md.find("| 16 | 12 |") != std::string::npos);
  CHECK(md.find("chunked_rebuild_stall_vs_whole=") != std::string::npos);

  ChunkedPrefillBenchOptions oracle = o;
  oracle.payload = "oracle";  // nothing to rebuild
  CHECK(RunChunkedPrefillBench(oracle).status().code() == absl::StatusCode::kInvalidArgument);
  ChunkedPrefillBenchOptions bad;
  bad.shape = "stories260K";
  bad.sekv_budget = 1.5;
  CHECK(RunChunkedPrefillBench(bad).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace scd::bench
