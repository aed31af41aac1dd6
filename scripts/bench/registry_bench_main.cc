// scd-registry-bench: the etcd registry at cluster scale (common/tools/cluster/registry_load.h):
// N simulated decode daemons announcing under leases, M simulated prefill daemons watching,
// against a loopback etcd. Prints progress, then a Markdown table; writes PREFIX.md and
// PREFIX.json.
//   scd-registry-bench --decode 100 --prefill 10 --out docs/results/registry_bench
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/str_format.h"
#include "common/tools/cli/flags.h"
#include "common/tools/cluster/etcd_cluster.h"
#include "common/tools/cluster/registry_load.h"

namespace {

constexpr char kProgram[] = "scd-registry-bench";

std::string Markdown(const scd::cluster::RegistryLoadOptions& o,
                     const scd::cluster::RegistryLoadResult& r, const std::string& date) {
  std::string md = absl::StrFormat(
      "# etcd registry at scale\n\n%s, %d cores; %d-member etcd on loopback; %d decode "
      "announcers (lease %.0f s, refresh every %.2f s, load changing at every refresh), %d "
      "prefill watchers; %.0f s steady state.\n\n| measure | value |\n|---|---:|\n",
      date, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), o.members, o.decode,
      absl::ToDoubleSeconds(o.lease), absl::ToDoubleSeconds(o.lease) / 3, o.prefill,
      absl::ToDoubleSeconds(o.steady));
  md += absl::StrFormat("| every watcher sees every announcer after start | %.2f s |\n",
                        r.join_all_s);
  md += absl::StrFormat("| announcement size | %.0f B |\n", r.announcement_bytes);
  md += absl::StrFormat("| lease keep-alives | %.1f /s |\n", r.keepalives_per_s);
  md += absl::StrFormat("| load updates written | %.1f /s |\n", r.puts_per_s);
  md += absl::StrFormat("| watch events delivered (all watchers) | %.0f /s |\n", r.events_per_s);
  md += absl::StrFormat("| load update, write to watcher, p50 / p99 | %.1f / %.1f ms |\n",
                        r.update_latency_p50_ms, r.update_latency_p99_ms);
  md += absl::StrFormat("| etcd CPU, all members | %.1f %% of a core |\n", r.etcd_cpu_percent);
  md += absl::StrFormat("| etcd RSS, all members | %.0f MiB |\n", r.etcd_rss_mib);
  return md;
}

}  // namespace

int main(int argc, char** argv) {
  scd::cluster::RegistryLoadOptions o;
  std::string out;
  float lease_s = 5, steady_s = 20;
  scd::cli::FlagParser flags(kProgram, "--out PREFIX [--decode N] [--prefill M]");
  flags.AddString("out", &out, "output prefix (PREFIX.md, PREFIX.json)", true);
  flags.AddInt("decode", &o.decode, "simulated decode daemons (announcers)");
  flags.AddInt("prefill", &o.prefill, "simulated prefill daemons (watchers)");
  flags.AddInt("members", &o.members, "etcd members");
  flags.AddFloat("lease", &lease_s, "lease in seconds (refresh: a third of it)");
  flags.AddFloat("steady", &steady_s, "measured window in seconds");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (o.decode < 1 || o.prefill < 1 || o.members < 1 || lease_s < 2 || steady_s <= 0) {
    return flags.UsageError("--decode, --prefill, --members >= 1; --lease >= 2; --steady > 0");
  }
  if (!scd::cluster::EtcdCluster::Available()) {
    return flags.Fail("etcd not found on PATH (Debian package etcd-server; scripts/setup.sh)");
  }
  o.lease = absl::Seconds(lease_s);
  o.steady = absl::Seconds(steady_s);
  char tmpl[] = "/tmp/scd-registry-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return flags.Fail("cannot make a temporary directory");
  o.dir = tmpl;
  o.progress = [](const std::string& s) { std::cerr << kProgram << ": " << s << "\n"; };
  absl::StatusOr<scd::cluster::RegistryLoadResult> r = scd::cluster::RunRegistryLoad(o);
  std::filesystem::remove_all(o.dir);
  if (!r.ok()) return flags.Fail(r.status());
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  const std::string md = Markdown(o, *r, date);
  std::cout << md;
  std::ofstream(out + ".md") << md;
  nlohmann::json j = r->ToJson(o);
  j["date"] = date;
  std::ofstream(out + ".json") << j.dump(2) << "\n";
  return 0;
}
