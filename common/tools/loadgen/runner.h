// RunLoad: drives an OpenAI-compatible server with streaming requests and returns one record
// per request.
//
// Two load shapes:
//   - open loop (rate > 0): Poisson arrivals (arrivals.h); a dispatcher thread sleeps until
//     each arrival and hands the request to an ElasticThreadPool, so in-flight requests never
//     hold back later arrivals. Each record keeps its scheduled time, and start - scheduled is
//     the client's own lag: when it grows the client, not the server, limited the rate
//     (reported, never hidden). max_in_flight is a safety valve against runaway thread counts;
//     when it bites, the lag shows it.
//   - closed loop (concurrency > 0): that many workers, each sending its next request as soon
//     as the previous one ends.
// The measured phase ends when `requests` have been issued or `duration_s` has passed,
// whichever comes first (0 disables either); requests in flight then run to their outcome
// (bounded by the per-request timeout), so every issued request is counted exactly once.
// Setting *stop (e.g. from SIGINT) ends issuing early in the same way. Warm-up requests run
// first, closed-loop at `concurrency` (4 in open-loop mode), and are reported apart, timed from
// their own start. Prompts are taken in order, cycling, continuing after the warm-up's (a
// seeded shuffle per pass with `shuffle`), so shared-prefix groups stay consecutive.
//
// A monitor thread reports progress every progress_period_s (to on_progress) and, every
// interval_s, samples the resident set size (VmRSS) of the processes in rss_pids and of this
// client, for soak runs that watch a server for leaks.
#ifndef SCD_COMMON_TOOLS_LOADGEN_RUNNER_H_
#define SCD_COMMON_TOOLS_LOADGEN_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tools/loadgen/request_record.h"
#include "common/tools/loadgen/stream_client.h"
#include "common/tools/loadgen/workload.h"

namespace scd::loadgen {

struct LoadOptions {
  ClientOptions client;
  // More servers (several prefill daemons): request i goes to client.target when
  // i % (1 + more_targets.size()) is 0, else to more_targets[that - 1].
  std::vector<Target> more_targets;
  BodyOptions body;
  double rate = 0;        // requests/s, Poisson (open loop)
  int concurrency = 0;    // requests in flight (closed loop); exactly one of rate/concurrency
  int64_t requests = 0;   // measured requests; 0: no limit (then duration_s is needed)
  double duration_s = 0;  // issuing window; 0: no limit
  int warmup = 0;         // warm-up requests before the measured phase
  uint64_t seed = 0;      // arrivals and shuffling
  bool shuffle = false;
  int max_in_flight = 4096;  // open loop only
  double interval_s = 10;    // RSS sampling period
  std::vector<int> rss_pids;
  // Optional names of the rss_pids processes, one each (e.g. "prefill"), for the report and
  // its plot; empty: they are named by pid.
  std::vector<std::string> rss_labels;
  double progress_period_s = 1;
  const std::atomic<bool>* stop = nullptr;  // issuing stops once it reads true
};

// InvalidArgument naming the first bad option.
absl::Status ValidateLoadOptions(const LoadOptions& options);

// What the progress line shows.
struct Progress {
  bool warmup = false;
  double elapsed_s = 0;
  int64_t issued = 0, completed = 0, ok = 0, errors = 0, in_flight = 0;
  int64_t target_requests = 0;   // 0: none
  double target_duration_s = 0;  // 0: none
  int64_t ttft_count = 0;
  double ttft_p50_s = 0, ttft_p99_s = 0;  // of the ok requests completed so far
  int64_t output_tokens = 0;
  double max_lag_s = 0;
};
// e.g. "[  12.0s/60s] issued 120 done 115 (ok 113, err 2) in-flight 5 | 9.6 req/s 812 tok/s |
// TTFT p50 45 ms p99 120 ms"
std::string FormatProgress(const Progress& progress);

struct RssSample {
  double t_s = 0;            // since the measured phase began
  std::vector<int64_t> kib;  // per rss_pids entry; -1 when unreadable (process gone)
  int64_t client_kib = -1;
};

struct RunResult {
  std::vector<RequestRecord> warmup;
  std::vector<RequestRecord> records;  // the measured phase, in issue order
  std::vector<RssSample> rss;
  std::string started_at;   // UTC wall clock of the measured phase start, ISO 8601
  double issue_span_s = 0;  // from the measured phase start to the last issue
  bool stopped = false;     // *stop ended issuing
  int peak_in_flight = 0;
  int threads_started = 0;  // client request threads (open loop)
};

// VmRSS of `pid` in KiB (pid 0: this process); -1 when it cannot be read.
int64_t ReadRssKib(int pid);

// The load the end-to-end drivers (soak, front-door bench) put on a local pair: greedy
// streaming completions of `max_tokens` for `model` at http://127.0.0.1:`http_port`, a 120-s
// client timeout, progress every 10 s, seed 1. Rates and durations are the caller's.
LoadOptions GreedyCompletionLoad(int http_port, const std::string& model, int max_tokens);

// Runs the warm-up and the measured phase. Errors are configuration errors only; request
// failures are outcomes in the records. `on_progress` (may be empty) runs on the monitor
// thread.
absl::StatusOr<RunResult> RunLoad(const LoadOptions& options, const std::vector<Prompt>& prompts,
                                  const std::function<void(const Progress&)>& on_progress = {});

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_RUNNER_H_
