// The soak run: one prefill daemon and N decode daemons (real processes on
// loopback) under open-loop load at a fraction of their measured saturation rate for a long
// time, with pass criteria on failures, daemon memory and latency drift.
//
// 1. Start the cluster and wait until every decode daemon is registered.
// 2. Saturation: closed-loop runs at rising concurrency (1, 2, 4, ... 64). Each level's rate is
//    its ok requests over its duration. The sweep stops when a level gains less than 5% over
//    the best so far. Closed loop overstates what the daemons sustain under Poisson arrivals
//    (bursts queue, and the client's threads share the host), so open-loop probes follow:
//    from half the best closed-loop rate, 15% more per probe, while the daemons keep up (no
//    failures, completions >= 95% of the rate asked, TTFT p50 within 3x of the first probe's).
//    The highest rate that kept up is the saturation rate.
// 3. Soak: Poisson arrivals at load_fraction x saturation for duration_s, sampling every
//    daemon's VmRSS every interval_s.
// 4. Verdict, each criterion reported with its figures:
//    - zero failed and zero lost requests, and every daemon still running at the end;
//    - RSS flat: after rss_warmup_s, the median RSS of every drift_window_s window within
//      rss_tolerance of the first window's, for every daemon (a single sample also counts
//      the requests in flight at that moment; the peak sample is reported, not judged);
//    - p99 TTFT of the last drift_window_s at most ttft_drift_tolerance above the first's.
//      One-sided: drift is a degradation (a leak, a growing queue), and a p99 that fell is
//      not one. The default bound is of the order of the noise itself: with no trend, the
//      first and last minutes' p99 differed by up to +10.5% and -18.3% between runs on the
//      2-core host of docs/RESULTS.md ("Soak"), so a rise just past the bound calls for a
//      rerun before it is read as drift; a real leak keeps rising over a longer run.
//    Finally each daemon gets SIGTERM and must exit 0.
// With a given saturation_rate, step 2 is skipped (runs to compare, at one rate). With
// shadow_rate (and the shadow's piece size and token budget), the decode daemons' quality keys
// are set, and the shadow oracle's samples taken and dropped over the run are read from their
// /metrics and reported.
#ifndef SCD_COMMON_TOOLS_E2E_SOAK_H_
#define SCD_COMMON_TOOLS_E2E_SOAK_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tools/loadgen/workload.h"
#include "nlohmann/json.hpp"

namespace scd::e2e {

struct SoakOptions {
  std::string bin_dir = "build/bin";
  std::string base_model, specialist_model, artifact;  // absolute paths
  std::string specialist_name = "specialist";
  std::string mode = "scd";
  int decode_daemons = 2;
  std::string workdir;  // configs and daemon logs
  std::vector<loadgen::Prompt> prompts;
  int max_tokens = 16;

  std::vector<int> saturation_concurrency = {1, 2, 4, 8, 16, 32, 64};
  double saturation_level_s = 30;
  double probe_s = 20;  // each open-loop probe
  double load_fraction = 0.7;
  double duration_s = 600;
  int warmup_requests = 20;
  double interval_s = 10;

  double rss_warmup_s = 60;
  double rss_tolerance = 0.05;
  double drift_window_s = 60;
  double ttft_drift_tolerance = 0.10;  // largest rise of the last window's p99 (one-sided)

  double saturation_rate = 0;   // requests/s; > 0: given, no sweep
  double shadow_rate = -1;      // the decode daemons' quality.shadow_rate; < 0: their default
  int shadow_piece_tokens = 0;  // their quality.shadow_piece_tokens; 0: their default
  double shadow_max_tokens_per_s = 0;  // their quality.shadow_max_tokens_per_s; 0: their default
};

struct SaturationLevel {
  int concurrency = 0;    // closed-loop level; 0 for an open-loop probe
  double rate_asked = 0;  // open-loop probe: Poisson rate asked (requests/s)
  bool kept_up = true;    // open-loop probe: see RunSoak
  int64_t ok = 0, failed = 0;
  double requests_per_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
};

struct SoakCheck {
  std::string name;
  bool passed = false;
  std::string detail;
};

struct SoakResult {
  std::vector<SaturationLevel> saturation;
  double saturation_rate = 0;        // requests/s
  double soak_rate = 0;              // requests/s asked
  std::vector<std::string> daemons;  // names, in the order of the report's rss_pids
  nlohmann::json report;             // the soak phase's scd-loadgen report (report.h)
  std::vector<SoakCheck> checks;
  bool passed = false;
  double shadow_samples = 0, shadow_dropped = 0;  // over every decode daemon
};

using SoakProgressFn = std::function<void(const std::string& line)>;

// Errors are setup failures (a daemon that does not start or register); a failed criterion
// is a result with passed = false.
absl::StatusOr<SoakResult> RunSoak(const SoakOptions& options, const SoakProgressFn& progress);

// The checks of a finished soak phase, from its report and the daemons' RSS samples
// (exposed for tests). `alive[i]`: daemon i still ran when the load ended.
std::vector<SoakCheck> EvaluateSoak(const SoakOptions& options, const nlohmann::json& report,
                                    const std::vector<std::string>& daemons,
                                    const std::vector<bool>& alive);

nlohmann::json SoakResultJson(const SoakOptions& options, const SoakResult& result);
// Saturation table, soak figures, and one row per check.
std::string SoakMarkdown(const SoakResult& result);

}  // namespace scd::e2e

#endif  // SCD_COMMON_TOOLS_E2E_SOAK_H_
