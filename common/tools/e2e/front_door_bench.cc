// See front_door_bench.h.
#include "common/tools/e2e/front_door_bench.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/tools/cluster/daemon_process.h"
#include "common/tools/cluster/local_cluster.h"
#include "common/tools/loadgen/report.h"
#include "common/tools/loadgen/runner.h"
#include "common/tools/loadgen/slow_clients.h"

namespace scd::e2e {
namespace {

constexpr char kToken[] = "front-door-bench-token";

absl::StatusOr<cluster::LocalPair> StartPair(const FrontDoorBenchOptions& o) {
  nlohmann::json c;
  c["base_model"] = o.base_model;
  c["http"] = {{"port", 0}};
  c["control_plane"] = {{"cluster_token", kToken}};
  c["limits"] = {{"max_tokens", 256}, {"request_timeout", "120s"}};
  c["specialists"] = nlohmann::json::array({{{"name", o.specialist_name},
                                             {"artifact", o.artifact},
                                             {"consumer_path", o.specialist_model},
                                             {"mode", "scd"}}});
  cluster::DecodeDaemonSpec spec;
  spec.model_name = o.specialist_name;
  spec.model_path = o.specialist_model;
  spec.artifact = o.artifact;
  spec.cluster_token = kToken;
  return cluster::StartLocalPair(o.bin_dir, c, spec, o.decode_daemons, o.workdir);
}

loadgen::LoadOptions BaseLoad(const FrontDoorBenchOptions& o, int http_port) {
  loadgen::LoadOptions load =
      loadgen::GreedyCompletionLoad(http_port, o.specialist_name, o.max_tokens);
  return load;
}

// /health every 100 ms until stopped; a probe fails on an error status or no answer in 2 s.
class HealthProber {
 public:
  explicit HealthProber(int port) {
    thread_ = std::thread([this, port] {
      httplib::Client client("127.0.0.1", port);
      client.set_connection_timeout(2, 0);
      client.set_read_timeout(2, 0);
      while (!stop_) {
        const auto start = std::chrono::steady_clock::now();
        auto res = client.Get("/health");
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        ++probes;
        if (!res || res->status != 200) ++failed;
        max_ms = std::max(max_ms.load(), ms);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the probe period
      }
    });
  }
  ~HealthProber() {
    stop_ = true;
    thread_.join();
  }
  std::atomic<int64_t> probes{0}, failed{0};
  std::atomic<double> max_ms{0};

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

absl::StatusOr<nlohmann::json> Measure(const loadgen::LoadOptions& load,
                                       const std::vector<loadgen::Prompt>& prompts) {
  absl::StatusOr<loadgen::RunResult> run = loadgen::RunLoad(load, prompts);
  if (!run.ok()) return run.status();
  return loadgen::BuildReport(load, *run, loadgen::ReportContext());
}

// CPU seconds (user + system) a process has used so far; -1 when unreadable.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return -1;
  // Fields after the parenthesised command: state is field 3, utime 14 and stime 15.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

absl::StatusOr<FrontDoorRun> MeasureRun(const FrontDoorBenchOptions& o, int port, double rate,
                                        bool slow, int64_t* reopened, pid_t prefill) {
  std::unique_ptr<loadgen::SlowClients> clients;
  if (slow) {
    loadgen::SlowClientOptions so;
    so.port = port;
    so.connections = o.slow_connections;
    SCD_ASSIGN_OR_RETURN(clients, loadgen::SlowClients::Start(so));
    // Measure once the ramp has opened (nearly) all of them.
    const auto deadline = std::chrono::steady_clock::now() + so.ramp * 3;
    while (clients->held() < o.slow_connections * 99 / 100 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling the pool's count
    }
  }
  loadgen::LoadOptions load = BaseLoad(o, port);
  load.rate = rate;
  load.duration_s = o.run_s;
  load.warmup = 5;
  const auto start = std::chrono::steady_clock::now();
  const double prefill_start = ProcessCpuSeconds(prefill), self_start = ProcessCpuSeconds(getpid());
  SCD_ASSIGN_OR_RETURN(const nlohmann::json report, Measure(load, o.prompts));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  FrontDoorRun r;
  r.prefill_cpu = (ProcessCpuSeconds(prefill) - prefill_start) / seconds;
  r.client_cpu = (ProcessCpuSeconds(getpid()) - self_start) / seconds;
  r.slow = slow;
  r.slow_held = clients != nullptr ? clients->held() : 0;
  if (clients != nullptr) *reopened += clients->reopened();
  r.ok = report["requests"]["ok"].get<int64_t>();
  r.failed = report["requests"]["failed"].get<int64_t>();
  if (!report["ttft_ms"]["p50"].is_null()) {
    r.ttft_p50_ms = report["ttft_ms"]["p50"].get<double>();
    r.ttft_p99_ms = report["ttft_ms"]["p99"].get<double>();
  }
  return r;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double P99Ratio(const std::vector<FrontDoorRun>& runs) {
  std::vector<double> with, without;
  for (const FrontDoorRun& r : runs) (r.slow ? with : without).push_back(r.ttft_p99_ms);
  const double base = Median(without);
  return base > 0 ? Median(with) / base : 0;
}

}  // namespace

absl::StatusOr<FrontDoorResult> RunFrontDoorBench(const FrontDoorBenchOptions& o,
                                                  const ProgressFn& progress) {
  progress("starting the daemons");
  SCD_ASSIGN_OR_RETURN(cluster::LocalPair pair, StartPair(o));
  FrontDoorResult result;
  loadgen::LoadOptions saturation = BaseLoad(o, pair.http_port);
  saturation.concurrency = o.saturation_concurrency;
  saturation.duration_s = o.saturation_s;
  saturation.warmup = 5;
  progress(absl::StrCat("saturation: closed loop at concurrency ", o.saturation_concurrency));
  SCD_ASSIGN_OR_RETURN(const nlohmann::json sat, Measure(saturation, o.prompts));
  result.saturation_rps = sat["throughput"]["requests_per_s"].get<double>();
  result.rate = o.load_fraction * result.saturation_rps;
  HealthProber prober(pair.http_port);
  for (int round = 0; round < o.rounds; ++round) {
    for (bool slow : {false, true}) {
      progress(absl::StrFormat("round %d/%d: %.1f req/s %s", round + 1, o.rounds, result.rate,
                               slow ? absl::StrCat("with ", o.slow_connections, " slow clients")
                                    : std::string("without slow clients")));
      SCD_ASSIGN_OR_RETURN(FrontDoorRun run,
                           MeasureRun(o, pair.http_port, result.rate, slow, &result.slow_reopened,
                                      pair.prefill->pid()));
      progress(absl::StrFormat(
          "  ok %d failed %d, TTFT p50 %.1f ms p99 %.1f ms, held %d, CPU prefill %.2f client %.2f",
          run.ok, run.failed, run.ttft_p50_ms, run.ttft_p99_ms, run.slow_held, run.prefill_cpu,
          run.client_cpu));
      result.runs.push_back(run);
    }
  }
  result.probes = prober.probes;
  result.probes_failed = prober.failed;
  result.probe_max_ms = prober.max_ms;
  result.p99_ratio = P99Ratio(result.runs);
  return result;
}

nlohmann::json FrontDoorJson(const FrontDoorBenchOptions& o, const FrontDoorResult& r) {
  nlohmann::json runs = nlohmann::json::array();
  for (const FrontDoorRun& run : r.runs) {
    runs.push_back({{"slow_clients", run.slow},
                    {"slow_held", run.slow_held},
                    {"ok", run.ok},
                    {"failed", run.failed},
                    {"ttft_p50_ms", run.ttft_p50_ms},
                    {"ttft_p99_ms", run.ttft_p99_ms},
                    {"prefill_cpu", run.prefill_cpu},
                    {"client_cpu", run.client_cpu}});
  }
  return {{"slow_connections", o.slow_connections},
          {"saturation_rps", r.saturation_rps},
          {"rate", r.rate},
          {"load_fraction", o.load_fraction},
          {"run_s", o.run_s},
          {"runs", runs},
          {"health_probes", r.probes},
          {"health_probes_failed", r.probes_failed},
          {"health_probe_max_ms", r.probe_max_ms},
          {"slow_reopened", r.slow_reopened},
          {"p99_ratio", r.p99_ratio}};
}

std::string FrontDoorMarkdown(const FrontDoorBenchOptions& o, const FrontDoorResult& r) {
  std::string md = absl::StrFormat(
      "Saturation %.1f req/s; load %.1f req/s (%.0f%%), %g s per run.\n\n"
      "| run | slow clients held | ok | failed | TTFT p50 ms | TTFT p99 ms | prefill CPU | "
      "client CPU |\n|---|---|---|---|---|---|---|---|\n",
      r.saturation_rps, r.rate, 100 * o.load_fraction, o.run_s);
  for (size_t i = 0; i < r.runs.size(); ++i) {
    const FrontDoorRun& run = r.runs[i];
    md += absl::StrFormat("| %d | %d | %d | %d | %.1f | %.1f | %.2f | %.2f |\n", i + 1,
                          run.slow_held, run.ok, run.failed, run.ttft_p50_ms, run.ttft_p99_ms,
                          run.prefill_cpu, run.client_cpu);
  }
  md += absl::StrFormat(
      "\np99 with / without slow clients (medians): **%.3f**. /health: %d probes, %d failed, "
      "slowest %.1f ms. Slow connections closed by the header deadline and reopened: %d.\n",
      r.p99_ratio, r.probes, r.probes_failed, r.probe_max_ms, r.slow_reopened);
  return md;
}

}  // namespace scd::e2e
