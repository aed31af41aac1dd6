// The front door under slow clients: does a crowd of idle, slowly-sending connections hurt the
// clients that are being served? Starts one prefill daemon and its decode daemons, finds the
// saturation rate (closed loop), then runs Poisson load at `load_fraction` of it, alternating
// runs without and with `slow_connections` slow clients held (SlowClients), `rounds` times, so
// that the machine's drift falls on both sides alike. A prober asks /health every 100 ms
// throughout. Reports each run's TTFT p50/p99 and errors, the probes, and the ratio of the
// median p99 with slow clients to the median p99 without.
#ifndef SCD_COMMON_TOOLS_E2E_FRONT_DOOR_BENCH_H_
#define SCD_COMMON_TOOLS_E2E_FRONT_DOOR_BENCH_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tools/loadgen/workload.h"
#include "nlohmann/json.hpp"

namespace scd::e2e {

struct FrontDoorBenchOptions {
  std::string bin_dir = "build/bin";
  std::string base_model, specialist_model, artifact;  // absolute paths
  std::string specialist_name = "specialist";
  int decode_daemons = 2;
  std::string workdir;  // configs and daemon logs
  std::vector<loadgen::Prompt> prompts;
  int max_tokens = 16;
  double saturation_s = 20;  // the closed-loop run that finds the saturation rate
  int saturation_concurrency = 16;
  double load_fraction = 0.5;
  double run_s = 30;  // each measured run
  int rounds = 2;     // pairs of runs (without, with)
  int slow_connections = 10000;
};

struct FrontDoorRun {
  bool slow = false;  // slow clients held during the run
  int slow_held = 0;  // held at the run's end
  int64_t ok = 0, failed = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  // CPU seconds per second of the run: the prefill daemon's, and this process's (the load
  // generator and the slow clients), so that the server's cost is told from the clients'.
  double prefill_cpu = 0, client_cpu = 0;
};

struct FrontDoorResult {
  double saturation_rps = 0, rate = 0;
  std::vector<FrontDoorRun> runs;
  int64_t probes = 0, probes_failed = 0;
  double probe_max_ms = 0;
  int64_t slow_reopened = 0;  // slow connections the server closed (header deadline) and reopened
  double p99_ratio = 0;       // median p99 with slow clients / median p99 without
};

using ProgressFn = std::function<void(const std::string& line)>;

absl::StatusOr<FrontDoorResult> RunFrontDoorBench(const FrontDoorBenchOptions& options,
                                                  const ProgressFn& progress);
nlohmann::json FrontDoorJson(const FrontDoorBenchOptions& options, const FrontDoorResult& r);
std::string FrontDoorMarkdown(const FrontDoorBenchOptions& options, const FrontDoorResult& r);

}  // namespace scd::e2e

#endif  // SCD_COMMON_TOOLS_E2E_FRONT_DOOR_BENCH_H_
