// The end-to-end benchmark: one prefill daemon and N decode daemons, real
// processes on loopback, serving a shared-prefix workload for every (codec mode, emulated
// bandwidth, prefix cache warm/cold) cell of one run, so that every comparison is side by side.
//
// Per cell the prefill daemon is restarted with that mode, bandwidth cap and cache setting (the
// decode daemons stay up and re-register by themselves: the payload carries its mode, so they
// are mode-agnostic). Requests go sequentially over the gRPC Generation API, greedy, so that
// each TTFT is one request's own path: queue + producer prefill + encode + transfer + rebuild
// + suffix prefill (+ RPC hops). TTFT is the prefill daemon's own (Timings.ttft_ms): the
// request's arrival to its first generated token. The first text can come tokens later (a
// token that ends inside a character streams nothing), and how many depends on what the model
// writes, not on the mode. The final `done` event carries the daemons' stage timings.
//
// With several passes, every cell is measured once per pass, and each pass rotates the order of
// the modes: cells minutes apart on a host that drifts (a daemon's prefill slowing by 5% over a
// run) would otherwise compare the drift, not the modes. Each cell pools its passes' samples.
//
// Warm: the first question of each context fills the prefix cache and is not timed; the
// others reuse the cached codes. Cold: the cache is off, so every request pays the producer
// prefill. Oracle mode sends no KV; the consumer prefills everything (cold = warm).
#ifndef SCD_COMMON_TOOLS_E2E_E2E_BENCH_H_
#define SCD_COMMON_TOOLS_E2E_E2E_BENCH_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tools/e2e/link_steps.h"
#include "common/tools/e2e/shared_prefix_workload.h"
#include "nlohmann/json.hpp"

namespace scd::e2e {

struct E2eBenchOptions {
  std::string label;  // "bundled" or "synthetic-d1024"
  std::string bin_dir = "build/bin";
  std::string base_model, specialist_model, artifact;
  std::string specialist_name = "specialist";
  std::vector<std::string> modes = {"oracle", "raw", "quant8", "recompute", "scd"};
  double quality_floor = 0.95;  // the `auto` cells' specialist quality_floor
  std::vector<double> bandwidths_gbps = {1, 10, 100};
  bool warm = true, cold = true;
  int decode_daemons = 2;
  int max_tokens = 6;
  bool score_f1 = true;
  // Each cell is measured this many times, the passes one after another, each with the modes
  // in a rotated order; a cell's figures pool its passes' samples.
  int passes = 1;
  std::string transport = "tcp";
  std::string workdir;  // configs and daemon logs
  std::vector<SharedPrefixContext> workload;
};

struct StageMeans {
  double queue_ms = 0, prefill_ms = 0, encode_ms = 0, transfer_ms = 0, rebuild_ms = 0,
         suffix_prefill_ms = 0, server_ttft_ms = 0;
  double payload_bytes = 0;
};

struct E2eCell {
  std::string mode;
  double bandwidth_gbps = 0;
  std::string cache;  // "warm" or "cold"
  int requests = 0;   // timed requests
  int errors = 0;
  int cache_hits = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0, ttft_mean_ms = 0;
  StageMeans stages;  // means over timed requests
  double f1 = 0;      // over every answered question of the cell (timed or not)
  int scored = 0;
  std::map<std::string, int> chosen;  // timed requests by the mode they used ("scd r16/24 k3")
};

using ProgressFn = std::function<void(const std::string& line)>;

struct E2eCellKey {
  std::string mode;
  double bandwidth_gbps = 0;
  bool warm = false;
  bool operator==(const E2eCellKey& o) const {
    return mode == o.mode && bandwidth_gbps == o.bandwidth_gbps && warm == o.warm;
  }
};

// The cells of pass `pass` in the order they run: for each mode, its bandwidths, each warm then
// cold, with the modes rotated by `pass` (pass 0 is the report's order), so that over the
// passes every mode runs early and late.
std::vector<E2eCellKey> E2eCellOrder(const E2eBenchOptions& options, int pass);

absl::StatusOr<std::vector<E2eCell>> RunE2eBench(const E2eBenchOptions& options,
                                                 const ProgressFn& progress);

// One cluster with `mode: auto` and the prefix cache on, serving the workload (cycling) while
// the link goes through `steps`, changed through the prefill daemon's Admin API
// (link_steps.h). Progress: a line per step and every 10 s.
absl::StatusOr<std::vector<LinkSample>> RunLinkSteps(const E2eBenchOptions& options,
                                                     const std::vector<LinkStep>& steps,
                                                     const ProgressFn& progress);

nlohmann::json E2eCellsJson(const E2eBenchOptions& options, const std::vector<E2eCell>& cells);
// A Markdown table, one row per cell, with TTFT ratios against oracle in the same
// bandwidth/cache group.
std::string E2eCellsMarkdown(const std::vector<E2eCell>& cells);
// TTFT p50 against bandwidth, one series per mode (warm cells, or cold when no warm ones).
absl::Status WriteE2ePlot(const std::vector<E2eCell>& cells, const std::string& title,
                          const std::string& path);

}  // namespace scd::e2e

#endif  // SCD_COMMON_TOOLS_E2E_E2E_BENCH_H_
