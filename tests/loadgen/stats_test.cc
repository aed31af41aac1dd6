// Statistics of a load run on hand-built records: percentile interpolation, TTFT/ITL/TPOT/e2e
// summaries, throughput, goodput under an SLO, the per-interval time series and the
// first-vs-last-window drift.
#include "common/tools/loadgen/stats.h"

#include <vector>

#include "catch2/catch.hpp"
#include "common/tools/loadgen/request_record.h"

namespace scd::loadgen {
namespace {

// An ok request started at `start` with content chunks at the given absolute times.
RequestRecord OkRecord(int64_t index, double start, std::vector<double> chunks, double end,
                       int64_t completion_tokens) {
  RequestRecord r;
  r.index = index;
  r.scheduled_s = start;
  r.start_s = start;
  r.end_s = end;
  r.outcome = Outcome::kOk;
  r.http_status = 200;
  r.chunk_times_s = std::move(chunks);
  r.prompt_tokens = 10;
  r.completion_tokens = completion_tokens;
  return r;
}

RequestRecord Failed(int64_t index, double start, double end, Outcome outcome, int status = 0) {
  RequestRecord r;
  r.index = index;
  r.scheduled_s = start;
  r.start_s = start;
  r.end_s = end;
  r.outcome = outcome;
  r.http_status = status;
  return r;
}

TEST_CASE("percentiles interpolate linearly between closest ranks", "[cpu]") {
  const std::vector<double> four = {1, 2, 3, 4};
  CHECK(Percentile(four, 50) == Approx(2.5));
  CHECK(Percentile(four, 0) == 1);
  CHECK(Percentile(four, 100) == 4);
  CHECK(Percentile(four, 90) == Approx(3.7));  // h = 2.7
  CHECK(Percentile({7}, 99) == 7);
  CHECK(Percentile({}, 50) == 0);

  std::vector<double> hundred;  // 1..100
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  CHECK(Percentile(hundred, 50) == Approx(50.5));
  CHECK(Percentile(hundred, 90) == Approx(90.1));
  CHECK(Percentile(hundred, 99) == Approx(99.01));

  const Distribution d = Summarize({4, 1, 3, 2});  // unsorted input
  CHECK(d.count == 4);
  CHECK(d.mean == Approx(2.5));
  CHECK(d.min == 1);
  CHECK(d.max == 4);
  CHECK(d.p50 == Approx(2.5));
  CHECK(d.p99 == Approx(3.97));

  const nlohmann::json empty = DistributionJson(Summarize({}), 1e3);
  CHECK(empty["count"] == 0);
  CHECK(empty["p50"].is_null());
  const nlohmann::json ms = DistributionJson(Summarize({0.5}), 1e3);
  CHECK(ms["p99"].get<double>() == Approx(500));
}

TEST_CASE("run statistics: TTFT, ITL, TPOT, e2e, throughput and outcome counts", "[cpu]") {
  std::vector<RequestRecord> records = {
      // TTFT 0.1, gaps 0.02 and 0.04, 3 tokens, e2e 0.2.
      OkRecord(0, 0.0, {0.1, 0.12, 0.16}, 0.2, 3),
      // TTFT 0.3, one gap 0.05, 2 tokens, e2e 0.4.
      OkRecord(1, 1.0, {1.3, 1.35}, 1.4, 2),
      Failed(2, 1.5, 1.6, Outcome::kHttpError, 429),
      Failed(3, 1.6, 1.7, Outcome::kHttpError, 429),
      Failed(4, 1.7, 1.8, Outcome::kHttpError, 500),
      Failed(5, 1.8, 2.0, Outcome::kTimeout),
  };
  const RunStats s = ComputeStats(records, Slo{});
  CHECK(s.issued == 6);
  CHECK(s.ok() == 2);
  CHECK(s.failed() == 4);
  CHECK(s.count(Outcome::kHttpError) == 3);
  CHECK(s.count(Outcome::kTimeout) == 1);
  CHECK(s.count(Outcome::kStreamError) == 0);
  CHECK(s.http_status.at(429) == 2);
  CHECK(s.http_status.at(500) == 1);

  CHECK(s.ttft_s.count == 2);
  CHECK(s.ttft_s.mean == Approx(0.2));
  CHECK(s.ttft_s.p50 == Approx(0.2));
  CHECK(s.itl_s.count == 3);  // pooled gaps 0.02, 0.04, 0.05
  CHECK(s.itl_s.p50 == Approx(0.04));
  CHECK(s.itl_s.max == Approx(0.05));
  CHECK(s.e2e_s.mean == Approx(0.3));
  // TPOT: (0.2 - 0.1) / 2 = 0.05 and (0.4 - 0.3) / 1 = 0.1.
  CHECK(s.tpot_s.count == 2);
  CHECK(s.tpot_s.mean == Approx(0.075));

  CHECK(s.duration_s == Approx(2.0));  // first start 0.0, last outcome 2.0
  CHECK(s.request_rps == Approx(1.0));
  CHECK(s.completion_tokens == 5);
  CHECK(s.prompt_tokens == 20);
  CHECK(s.output_tokens_per_s == Approx(2.5));
  CHECK(s.total_tokens_per_s == Approx(12.5));
  CHECK(s.usage_missing == 0);
  // No SLO: goodput is the ok throughput.
  CHECK(s.good == 2);
  CHECK(s.goodput_rps == Approx(1.0));
  CHECK(s.slo_attainment == Approx(2.0 / 6.0));
}

TEST_CASE("goodput counts only ok requests within both SLO bounds", "[cpu]") {
  std::vector<RequestRecord> records = {
      OkRecord(0, 0, {0.05, 0.06, 0.07}, 0.08, 3),  // TTFT 50 ms, mean ITL 10 ms: good
      OkRecord(1, 0, {0.25, 0.26}, 0.27, 2),        // TTFT 250 ms: misses TTFT
      OkRecord(2, 0, {0.05, 0.15}, 0.16, 2),        // mean ITL 100 ms: misses ITL
      OkRecord(3, 0, {0.10}, 0.1, 1),               // TTFT exactly at the bound, no gaps: good
      Failed(4, 0, 0.01, Outcome::kStreamError),    // never good
  };
  Slo slo;
  slo.ttft_s = 0.1;
  slo.itl_s = 0.05;
  CHECK(MeetsSlo(records[0], slo));
  CHECK_FALSE(MeetsSlo(records[1], slo));
  CHECK_FALSE(MeetsSlo(records[2], slo));
  CHECK(MeetsSlo(records[3], slo));
  CHECK_FALSE(MeetsSlo(records[4], slo));
  const RunStats s = ComputeStats(records, slo);
  CHECK(s.good == 2);
  CHECK(s.slo_attainment == Approx(0.4));
  CHECK(s.goodput_rps == Approx(2 / 0.27));

  Slo ttft_only;
  ttft_only.ttft_s = 0.1;
  CHECK(ComputeStats(records, ttft_only).good == 3);

  // Without a usage chunk, output tokens fall back to content chunks.
  RequestRecord no_usage = OkRecord(5, 0, {0.1, 0.2, 0.3}, 0.3, -1);
  CHECK(no_usage.output_tokens() == 3);
  const RunStats u = ComputeStats({no_usage}, Slo{});
  CHECK(u.usage_missing == 1);
  CHECK(u.completion_tokens == 3);
}

TEST_CASE("the time series buckets issues by start and outcomes by end", "[cpu]") {
  std::vector<RequestRecord> records = {
      OkRecord(0, 0.1, {0.2}, 0.3, 1),         // issued [0,1), done [0,1), TTFT 0.1
      OkRecord(1, 0.5, {1.0}, 1.2, 1),         // issued [0,1), done [1,2), TTFT 0.5
      OkRecord(2, 1.1, {1.4}, 1.5, 1),         // issued [1,2), done [1,2), TTFT 0.3
      Failed(3, 2.2, 2.5, Outcome::kTimeout),  // issued [2,3), done [2,3)
  };
  const std::vector<IntervalStats> series = TimeSeries(records, 1.0);
  REQUIRE(series.size() == 3);
  CHECK(series[0].issued == 2);
  CHECK(series[0].completed == 1);
  CHECK(series[1].issued == 1);
  CHECK(series[1].completed == 2);
  CHECK(series[1].ok == 2);
  CHECK(series[1].ttft_s.max == Approx(0.5));
  CHECK(series[1].ttft_s.min == Approx(0.3));
  CHECK(series[2].errors == 1);
  CHECK(series[2].ttft_s.count == 0);
  CHECK(series[2].t_start_s == 2.0);
  CHECK(series[2].t_end_s == 3.0);
  CHECK(TimeSeries({}, 1.0).empty());
}

TEST_CASE("TTFT drift compares the first and last windows of the issue span", "[cpu]") {
  std::vector<RequestRecord> records;
  // 100 s of requests, one per second; TTFT 100 ms in the first 30 s, 150 ms in the last 30.
  for (int i = 0; i < 100; ++i) {
    const double ttft = i < 30 ? 0.10 : (i >= 70 ? 0.15 : 0.12);
    records.push_back(OkRecord(i, i, {i + ttft}, i + ttft, 1));
  }
  std::optional<TtftDrift> drift = ComputeTtftDrift(records, 30);
  REQUIRE(drift.has_value());
  CHECK(drift->window_s == 30);
  CHECK(drift->first_count == 30);
  CHECK(drift->last_count == 31);  // starts 69..99 are >= 99 - 30 (69 itself has 120 ms)
  CHECK(drift->first_p99_s == Approx(0.10));
  CHECK(drift->last_p99_s == Approx(0.15));
  CHECK(drift->relative_change == Approx(0.5));
  // A span shorter than two windows halves it.
  CHECK(ComputeTtftDrift(records, 1000)->window_s == Approx(49.5));
  CHECK_FALSE(ComputeTtftDrift({}, 60).has_value());
}

}  // namespace
}  // namespace scd::loadgen
