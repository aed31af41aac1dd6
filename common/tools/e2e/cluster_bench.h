// The cluster benchmark (scd-cluster-bench): what the etcd registry and request migration
// cost and buy, measured with real processes on loopback, side by side in one run.
//
// 1. kill -9 of a decode daemon under concurrent greedy streams, once per
//    limits.migration_limit (0: a stream cut mid-way ends with an error; 1: it continues on the
//    other replica). One prefill daemon on the embedded registry and two decode daemons whose
//    steps are slowed (engine.min_step_interval) so that the kill lands mid-generation. Each
//    setting first takes reference texts from single undisturbed streams, then runs one
//    undisturbed round of all the streams (the control: batching must not change a greedy
//    text), then the round with the kill: decode-1 gets SIGKILL once enough streams have a
//    token. Every stream has one outcome, judged on the client's side from its SSE events:
//    completed with the reference text, completed with another text, an explicit error (an
//    error event or error body), lost (no terminal event), duplicated (two terminal events).
// 2. Membership on etcd: a 3-member etcd, two prefill daemons and two decode daemons, all on
//    control_plane.registry etcd with the same lease. Per repeat, one more decode daemon is
//    started (timed from its fork to being routable on both prefill daemons, by their
//    scd_decode_instances gauge polled every 10 ms, and by their decode_joined log lines),
//    then killed with SIGKILL (timed to its decode_left on both, by their logs polled every
//    10 ms, and to the gauges' drop).
// 3. Throughput of two prefill daemons against one, on the same cluster: closed-loop streams
//    through prefill-1 alone, then through both in turn (loadgen's more_targets), each run on
//    its own synthetic prompts so that neither finds the other's prefixes cached.
#ifndef SCD_COMMON_TOOLS_E2E_CLUSTER_BENCH_H_
#define SCD_COMMON_TOOLS_E2E_CLUSTER_BENCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::e2e {

struct ClusterBenchOptions {
  std::string bin_dir = "build/bin";
  std::string base_model, specialist_model, artifact;  // absolute paths
  std::string specialist_name = "stories260K-babi-qa";
  std::string etcd_binary = "etcd";
  std::string workdir;  // configs, daemon logs, etcd's data
  bool kill = true, membership = true, throughput = true;

  // 1. kill -9 under streams.
  std::vector<int> migration_limits = {0, 1};
  int streams = 32;
  int stream_tokens = 24;
  int distinct_prompts = 4;
  int kill_after_streaming = 8;  // streams with a token when decode-1 is killed
  std::string kill_step_interval = "50ms";

  // 2. Membership on etcd.
  int etcd_members = 3;
  int repeats = 3;
  std::string lease = "2s";  // every daemon's control_plane.lease

  // 3. Throughput.
  int requests = 64;
  int concurrency = 8;
  int warmup = 8;
  int max_tokens = 32;
  int prompt_words = 32;
};

// One round of streams against the embedded cluster.
struct StreamRound {
  int streams = 0;
  int identical = 0, different_text = 0, errors = 0, lost = 0, duplicated = 0;
  int streaming_at_kill = -1;         // streams with a token at the kill; -1: no kill
  double kill_at_s = 0;               // from the first request to the kill
  double last_outcome_s = 0;          // from the kill (else the first request) to the last outcome
  std::vector<std::string> examples;  // distinct error or loss descriptions, a few
};

struct KillSetting {
  int migration_limit = 0;
  StreamRound undisturbed, killed;
  // The prefill daemon's counters after the killed round.
  double migrations_completed = 0, migrations_failed = 0, migrations_refused = 0;
  double retries_before_first_token = 0;  // scd_decode_retries_total
};

// One membership figure over the repeats, in milliseconds.
struct Timing {
  std::string name;
  std::vector<double> samples_ms;
};

struct ThroughputRun {
  std::string label;
  int prefill_daemons = 0;
  int64_t issued = 0, ok = 0;
  double duration_s = 0, requests_per_s = 0, output_tokens_per_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
};

struct ClusterBenchResult {
  std::string date;  // UTC, ISO 8601
  int nproc = 0;
  std::string cpu_model;
  std::string openblas_threads;  // OPENBLAS_NUM_THREADS as the daemons inherit it ("" unset)
  // /proc/loadavg's 1, 5 and 15 minute figures as the run began and ended: on a shared host,
  // how busy it was (the end's includes this run's own daemons).
  std::string loadavg_start, loadavg_end;
  std::vector<KillSetting> kill;
  std::vector<Timing> membership;
  std::vector<ThroughputRun> throughput;
  double wall_s = 0;
};

using ClusterBenchProgressFn = std::function<void(const std::string& line)>;

// Errors are set-up failures (etcd or a daemon that does not start or register, a reference
// stream that fails); what the scenarios measure is in the result.
absl::StatusOr<ClusterBenchResult> RunClusterBench(const ClusterBenchOptions& options,
                                                   const ClusterBenchProgressFn& progress);

nlohmann::json ClusterBenchJson(const ClusterBenchOptions& options,
                                const ClusterBenchResult& result);
// The machine, then one table per scenario; `command` is printed as run.
std::string ClusterBenchMarkdown(const ClusterBenchOptions& options,
                                 const ClusterBenchResult& result, const std::string& command);

}  // namespace scd::e2e

#endif  // SCD_COMMON_TOOLS_E2E_CLUSTER_BENCH_H_
