// Statistics of a load run: latency percentiles, throughput, goodput and the per-interval
// time series.
//
// Percentiles use linear interpolation between closest ranks (Hyndman & Fan type 7, numpy's
// default): for sorted x[0..n), the q-th percentile is x[h] + (h - floor h)(x[ceil h] -
// x[floor h]) with h = (n - 1) q / 100. So p50 of {1, 2, 3, 4} is 2.5 and p0/p100 are the
// min and max.
//
// Definitions, over the measured (non-warm-up) requests:
//   TTFT   first content chunk - request start, ok requests only;
//   ITL    every gap between consecutive content chunks of ok requests, pooled;
//   TPOT   per ok request with > 1 output token: (e2e - TTFT) / (output tokens - 1);
//   e2e    outcome time - start, ok requests only;
//   duration  first request start to last outcome; throughputs divide by it;
//   shed      http_error requests answered 429, the server's refusal for load: how many, how
//             soon the refusal came (its e2e) and the Retry-After it carried;
//   goodput   ok requests that meet the SLO, per second of duration: TTFT <= slo.ttft and
//             mean ITL (the request's own mean gap, DistServe's TPOT-style per-request
//             criterion) <= slo.itl; a bound of 0 is no bound, so without an SLO goodput is
//             the ok throughput.
#ifndef SCD_COMMON_TOOLS_LOADGEN_STATS_H_
#define SCD_COMMON_TOOLS_LOADGEN_STATS_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/tools/loadgen/request_record.h"
#include "nlohmann/json.hpp"

namespace scd::loadgen {

// The q-th percentile (q in [0, 100]) of ascending `sorted` values; 0 when empty.
double Percentile(const std::vector<double>& sorted, double q);

struct Distribution {
  int64_t count = 0;
  double mean = 0, min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
Distribution Summarize(std::vector<double> values);
// {"count", "mean", "min", "p50", "p90", "p99", "max"}, each value times `scale` (1e3: s ->
// ms); values are null when count is 0.
nlohmann::json DistributionJson(const Distribution& d, double scale);

struct Slo {
  double ttft_s = 0;  // 0: no TTFT bound
  double itl_s = 0;   // 0: no ITL bound
};
bool MeetsSlo(const RequestRecord& record, const Slo& slo);

struct RunStats {
  int64_t issued = 0;
  std::array<int64_t, kNumOutcomes> outcomes{};  // indexed by Outcome
  std::map<int, int64_t> http_status;            // http_error requests by status code
  int64_t shed = 0;                              // of those, 429
  Distribution shed_answer_s;                    // their start to the 429
  Distribution retry_after_s;                    // their Retry-After, where sent
  Distribution ttft_s, itl_s, tpot_s, e2e_s;
  Distribution lag_s;             // start - scheduled, all requests
  int64_t prompt_tokens = 0;      // summed over ok requests (usage)
  int64_t completion_tokens = 0;  // summed over ok requests (usage, else content chunks)
  int64_t usage_missing = 0;      // ok requests without a usage chunk
  double duration_s = 0;
  double request_rps = 0;  // ok requests / duration
  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;  // prompt + completion
  int64_t good = 0;               // ok and within the SLO
  double goodput_rps = 0;
  double slo_attainment = 0;  // good / issued (0 when nothing was issued)

  int64_t count(Outcome outcome) const { return outcomes[static_cast<int>(outcome)]; }
  int64_t ok() const { return count(Outcome::kOk); }
  int64_t failed() const { return issued - ok(); }
};
RunStats ComputeStats(const std::vector<RequestRecord>& records, const Slo& slo);

// One interval [t_start, t_end) of the run: requests issued in it (by start time) and
// completed in it (by outcome time), with the TTFT of the ok ones completed in it.
struct IntervalStats {
  double t_start_s = 0, t_end_s = 0;
  int64_t issued = 0, completed = 0, ok = 0, errors = 0;
  int64_t output_tokens = 0;
  Distribution ttft_s;
};
// Intervals of `interval_s` from 0 until the last outcome (at least one when records exist).
std::vector<IntervalStats> TimeSeries(const std::vector<RequestRecord>& records, double interval_s);

// p99 TTFT of the ok requests started in the first and in the last `window_s` of the issue
// span [first start, last start]; the window shrinks to half the span when the span is
// shorter than two windows. Empty without ok requests in both windows.
struct TtftDrift {
  double window_s = 0;
  double first_p99_s = 0, last_p99_s = 0;
  int64_t first_count = 0, last_count = 0;
  double relative_change = 0;  // (last - first) / first
};
std::optional<TtftDrift> ComputeTtftDrift(const std::vector<RequestRecord>& records,
                                          double window_s);

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_STATS_H_
