// scd-cluster-bench: the cluster benchmark (see common/tools/e2e/cluster_bench.h). Starts
// scd-prefill and scd-decode from build/bin and a loopback etcd (Debian's etcd-server), and
// measures in one run: kill -9 of a decode daemon under concurrent greedy streams with
// limits.migration_limit 0 and 1, etcd membership timings (join and leave on two prefill
// daemons), and the throughput of two prefill daemons against one. Progress goes to stderr;
// PREFIX.md and PREFIX.json hold the tables, the machine and the date.
//   scd-cluster-bench [--out PREFIX] [--repeats N] [--requests N] [--quick]
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/tools/cli/flags.h"
#include "common/tools/cluster/etcd_cluster.h"
#include "common/tools/e2e/cluster_bench.h"

namespace {

constexpr char kProgram[] = "scd-cluster-bench";

// What the run needs before it starts anything: the fixtures, the daemons, etcd.
absl::Status CheckInputs(const scd::e2e::ClusterBenchOptions& o) {
  namespace fs = std::filesystem;
  for (const std::string& dir : {o.base_model, o.specialist_model}) {
    if (!fs::is_regular_file(dir + "/config.json")) {
      return absl::NotFoundError(
          absl::StrCat("model fixture missing: ", dir,
                       " (the models live in ../shared/models, relative to "
                       "the repository root: run from there, or pass --base / --specialist)"));
    }
  }
  if (!fs::is_regular_file(o.artifact)) {
    return absl::NotFoundError(absl::StrCat("calibration artifact missing: ", o.artifact));
  }
  for (const char* daemon : {"scd-prefill", "scd-decode"}) {
    const std::string path = absl::StrCat(o.bin_dir, "/", daemon);
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat(path, " is not built (cmake --build build --target ", daemon, ")"));
    }
  }
  if ((o.membership || o.throughput) && !scd::cluster::EtcdCluster::Available(o.etcd_binary)) {
    return absl::NotFoundError(
        absl::StrCat("etcd ('", o.etcd_binary,
                     "') not found on PATH: install Debian's etcd-server "
                     "(scripts/setup.sh does), or pass --skip-membership --skip-throughput"));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  scd::e2e::ClusterBenchOptions o;
  o.base_model = "../shared/models/stories260K";
  o.specialist_model = "../shared/models/stories260K-babi-qa";
  o.artifact = "configs/calibration/stories260K-babi-qa.scd.safetensors";
  std::string out = "docs/results/cluster_bench", workdir;
  bool skip_kill = false, skip_membership = false, skip_throughput = false, quick = false;
  scd::cli::FlagParser flags(kProgram, "[--out PREFIX] [options]");
  flags.AddString("out", &out, "output prefix: PREFIX.md and PREFIX.json");
  flags.AddString("workdir", &workdir, "configs, daemon logs and etcd data (default PREFIX.work)");
  flags.AddString("bin-dir", &o.bin_dir, "where scd-prefill and scd-decode are");
  flags.AddString("base", &o.base_model, "producer checkpoint");
  flags.AddString("specialist", &o.specialist_model, "consumer checkpoint");
  flags.AddString("artifact", &o.artifact, "the pair's calibration artifact");
  flags.AddString("etcd", &o.etcd_binary, "the etcd binary (looked up on PATH)");
  flags.AddIntList("migration-limits", &o.migration_limits,
                   "limits.migration_limit settings killed under");
  flags.AddInt("streams", &o.streams, "concurrent greedy streams at the kill");
  flags.AddInt("stream-tokens", &o.stream_tokens, "tokens per stream at the kill");
  flags.AddInt("kill-after", &o.kill_after_streaming, "streams with a token before the kill");
  flags.AddInt("repeats", &o.repeats, "membership repeats (join and leave)");
  flags.AddString("lease", &o.lease, "control_plane.lease of every daemon on etcd");
  flags.AddInt("requests", &o.requests, "measured requests per throughput run");
  flags.AddInt("concurrency", &o.concurrency, "closed-loop concurrency of the throughput runs");
  flags.AddInt("max-tokens", &o.max_tokens, "tokens per throughput request");
  flags.AddBool("skip-kill", &skip_kill, "leave out the kill -9 scenario");
  flags.AddBool("skip-membership", &skip_membership, "leave out the membership timings");
  flags.AddBool("skip-throughput", &skip_throughput, "leave out the throughput runs");
  flags.AddBool("quick", &quick, "for iterating: 1 membership repeat, 16 throughput requests");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (o.repeats < 1 || o.requests < 1 || o.concurrency < 1 || o.max_tokens < 1 || o.streams < 1 ||
      o.stream_tokens < 1 || o.kill_after_streaming < 1 || o.kill_after_streaming > o.streams) {
    return flags.UsageError(
        "--repeats, --requests, --concurrency, --max-tokens, --streams, "
        "--stream-tokens and --kill-after must be >= 1, --kill-after at most --streams");
  }
  for (int limit : o.migration_limits) {
    if (limit < 0 || limit > 8) return flags.UsageError("--migration-limits take values in [0, 8]");
  }
  if (quick) {  // what the command line names itself stays
    if (!flags.Seen("repeats")) o.repeats = 1;
    if (!flags.Seen("requests")) o.requests = 16;
    o.warmup = 4;
  }
  o.kill = !skip_kill;
  o.membership = !skip_membership;
  o.throughput = !skip_throughput;
  namespace fs = std::filesystem;
  // The daemons resolve relative config paths against the config file's directory.
  for (std::string* path : {&o.base_model, &o.specialist_model, &o.artifact, &o.bin_dir}) {
    *path = fs::absolute(*path).lexically_normal().string();
  }
  if (absl::Status s = CheckInputs(o); !s.ok()) return flags.Fail(s);
  o.workdir = fs::absolute(workdir.empty() ? out + ".work" : workdir).lexically_normal().string();
  std::error_code ec;
  fs::create_directories(o.workdir, ec);
  if (ec) return flags.Fail(absl::StrCat("cannot create ", o.workdir, ": ", ec.message()));
  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  std::cerr << kProgram << ": logs in " << o.workdir << "\n" << command << std::endl;
  auto result =
      scd::e2e::RunClusterBench(o, [](const std::string& line) { std::cerr << line << std::endl; });
  if (!result.ok()) return flags.Fail(result.status());

  nlohmann::json j = scd::e2e::ClusterBenchJson(o, *result);
  j["command"] = command;
  const std::string md = scd::e2e::ClusterBenchMarkdown(o, *result, command);
  if (fs::path parent = fs::path(out).parent_path(); !parent.empty())
    fs::create_directories(parent, ec);
  for (const auto& [path, text] :
       {std::pair<std::string, std::string>{
            out + ".json", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"},
        {out + ".md", md}}) {
    if (absl::Status s = scd::WriteFileAtomically(path, text); !s.ok()) return flags.Fail(s);
  }
  std::cout << md;
  std::cerr << kProgram << ": wrote " << out << ".md and " << out << ".json" << std::endl;
  return 0;
}
