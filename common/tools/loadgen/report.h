// The outputs of a load run: the results JSON, the per-request JSONL records, a text summary,
// the TTFT-distribution PNG and the time-series PNG.
//
// Results JSON (schema_version 1); latency objects are
//   {"count", "mean", "min", "p50", "p90", "p99", "max"} in milliseconds (null when count = 0):
// {
//   "tool": "scd-loadgen", "schema_version": 1, "command", "started_at",
//   "config":   {"url", "model", "api", "endpoint", "mode": "rate" | "concurrency", "rate",
//                "concurrency", "requests", "duration_s", "warmup", "max_tokens", "prompts",
//                "num_prompts", "timeout_s", "seed", "shuffle", "interval_s", "extra_body"},
//   "slo":      {"ttft_ms", "itl_ms" (null: no bound), "itl_criterion"},
//   "requests": {"issued", "completed", "ok", "failed", "lost",
//                "outcomes": {"ok", "http_error", "stream_error", "timeout", "connection_error"},
//                "http_status": {"<code>": n, ...}, "error_examples": [{"outcome", "error",
//                "count"}, ...], "stopped_early"},
//   "warmup":   {"issued", "ok", "failed"},
//   "duration_s", "issue_span_s",
//   "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms": latency objects (definitions in stats.h),
//   "throughput": {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s",
//                  "prompt_tokens", "completion_tokens", "usage_missing"},
//   "shed":     {"requests", "fraction" (of issued), "answer_ms" (latency object: start to the
//                429), "retry_after_s" (the same object's keys, in seconds)},
//   "goodput":  {"requests_per_s", "requests", "fraction"},
//   "schedule": {"mode", "target_rate", "achieved_rate", "lag_ms" (latency object),
//                "late_threshold_ms", "late_requests", "fell_behind", "peak_in_flight",
//                "client_threads"},
//   "ttft_drift": {"window_s", "first_p99_ms", "last_p99_ms", "first_count", "last_count",
//                  "relative_change"} | null,
//   "timeseries": {"interval_s", "rss_pids", "rss_labels" (when given),
//                  "points": [{"t_start_s", "t_end_s", "issued",
//                  "completed", "ok", "errors", "ttft_p50_ms", "ttft_p99_ms",
//                  "output_tokens_per_s", "rss_kib": [per pid], "client_rss_kib"}, ...],
//                  "rss_samples": [{"t_s", "kib": [per pid], "client_kib"}, ...]}
// }
// "lost" is issued minus the recorded outcomes, always 0 (RunLoad fails otherwise); it is
// there so that a soak check can assert it without recomputing.
#ifndef SCD_COMMON_TOOLS_LOADGEN_REPORT_H_
#define SCD_COMMON_TOOLS_LOADGEN_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/tools/loadgen/runner.h"
#include "common/tools/loadgen/stats.h"
#include "nlohmann/json.hpp"

namespace scd::loadgen {

struct ReportContext {
  std::string url;
  std::string prompts;  // the prompt file, or "synthetic:N words"
  int num_prompts = 0;
  std::string command;  // the command line, as typed
  Slo slo;
  double drift_window_s = 60;
  double late_threshold_s = 0.010;  // a request sent this much after its arrival is late
};

nlohmann::json BuildReport(const LoadOptions& options, const RunResult& result,
                           const ReportContext& context);

// One RecordJson line per request, warm-up first.
absl::Status WriteRecordsJsonl(const RunResult& result, const std::string& path);

// A few lines for the terminal: counts, percentiles, throughput, goodput, requests shed (429),
// schedule lag.
std::string SummaryText(const nlohmann::json& report);

// Histogram of the ok requests' TTFT (ms) with the p50/p90/p99 marked; log-spaced bins when
// the distribution is heavy-tailed (p99 > 20 x p50). FailedPrecondition without samples.
absl::Status WriteTtftPng(const std::vector<RequestRecord>& records, const std::string& path,
                          const std::string& title);

// p50/p99 TTFT per interval and, when RSS was sampled for --rss-pid processes, their RSS
// (MiB) in a second panel below, on the same time axis.
absl::Status WriteTimeSeriesPng(const nlohmann::json& report, const std::string& path);

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_REPORT_H_
