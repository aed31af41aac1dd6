// See registry_load.h.
#include "common/tools/cluster/registry_load.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/proc_status.h"
#include "common/rpc/decode_registry.h"
#include "common/rpc/etcd_client.h"
#include "common/rpc/etcd_registry.h"
#include "common/tools/cluster/etcd_cluster.h"

namespace scd::cluster {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kPrefix[] = "/scd-bench";
constexpr char kModel[] = "bench-specialist";
constexpr char kToken[] = "bench-token";
const std::string kDigest(64, 'c');

double NowUs() {
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

// utime + stime of a process, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double RssMib(pid_t pid) { return std::max<int64_t>(0, ProcStatusKib(pid, "VmRSS")) / 1024.0; }

std::unique_ptr<rpc::EtcdClient> Client(const std::string& endpoints) {
  rpc::EtcdOptions o;
  o.endpoints = rpc::ParseEtcdEndpoints(endpoints).value();
  return rpc::EtcdClient::Create(o).value();
}

// One simulated decode daemon: its own client and announcer; the load changes at every
// refresh (the worst case: a write each time) and the value carries the write time.
struct Announcer {
  std::unique_ptr<rpc::EtcdClient> client;
  std::unique_ptr<rpc::EtcdAnnouncer> announcer;
  std::atomic<int64_t> refreshes{0};
  size_t bytes = 0;
};

// One simulated prefill daemon: a DecodeRegistry fed by an EtcdDecodeMembership.
struct Watcher {
  std::unique_ptr<rpc::EtcdClient> client;
  std::unique_ptr<rpc::DecodeRegistry> registry;
  std::unique_ptr<rpc::EtcdDecodeMembership> membership;
};

std::unique_ptr<Announcer> MakeAnnouncer(const std::string& endpoints, int i,
                                         absl::Duration lease) {
  auto a = std::make_unique<Announcer>();
  a->client = Client(endpoints);
  rpc::DecodeInstanceInfo info{absl::StrCat("decode-", i),
                               kModel,
                               kDigest,
                               272,
                               absl::StrCat("tcp://10.0.", i / 250, ".", i % 250, ":7201"),
                               absl::StrCat("10.0.", i / 250, ".", i % 250, ":7101")};
  rpc::EtcdAnnouncerOptions o;
  o.key = rpc::EtcdDecodeKey(kPrefix, kModel, info.instance_id);
  Announcer* self = a.get();
  o.value = [self, info] {
    const int64_t n = self->refreshes.fetch_add(1);
    nlohmann::json v = nlohmann::json::parse(rpc::EncodeDecodeAnnouncement(
        info, {static_cast<int>(n % 17), static_cast<int>(n % 5)}, kToken));
    v["sent_us"] = NowUs();  // ignored by the membership; read by the latency probe
    std::string text = v.dump();
    self->bytes = text.size();
    return text;
  };
  o.lease = lease;
  o.refresh = lease / 3;
  a->announcer = rpc::EtcdAnnouncer::Create(a->client.get(), o).value();
  return a;
}

std::unique_ptr<Watcher> MakeWatcher(const std::string& endpoints) {
  auto w = std::make_unique<Watcher>();
  w->client = Client(endpoints);
  rpc::DecodeRegistryOptions ro;
  ro.cluster_token = kToken;
  ro.expected_pair_digests = {{kModel, kDigest}};
  ro.lease = absl::InfiniteDuration();
  ro.failure_quarantine = absl::Seconds(5);
  w->registry = rpc::DecodeRegistry::Create(ro).value();
  rpc::EtcdMembershipOptions mo;
  mo.prefix = kPrefix;
  mo.cluster_token = kToken;
  w->membership =
      std::make_unique<rpc::EtcdDecodeMembership>(w->client.get(), w->registry.get(), mo);
  w->membership->Start();
  return w;
}

// A raw watch on the decode keys: counts events and the write-to-delivery latency.
struct Probe {
  std::unique_ptr<rpc::EtcdClient> client;
  rpc::EtcdWatchCancel cancel;
  std::thread thread;
  std::mutex mu;
  std::vector<double> latency_ms;
  bool measuring = false;
  int64_t events = 0;
};

void StartProbe(Probe& p, int64_t revision) {
  p.thread = std::thread([&p, revision] {
    (void)p.client->Watch(
        rpc::EtcdDecodePrefix(kPrefix), revision + 1,
        [&p](const std::vector<rpc::EtcdEvent>& events) {
          const double now = NowUs();
          std::lock_guard<std::mutex> lock(p.mu);
          if (!p.measuring) return;
          for (const rpc::EtcdEvent& e : events) {
            ++p.events;
            nlohmann::json v = nlohmann::json::parse(e.value, nullptr, false);
            if (v.is_object() && v.contains("sent_us")) {
              p.latency_ms.push_back((now - v["sent_us"].get<double>()) / 1e3);
            }
          }
        },
        &p.cancel);
  });
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// The steady-state window: rates, the probe's latencies, etcd's CPU and memory.
void MeasureSteady(const RegistryLoadOptions& o, EtcdCluster& etcd,
                   const std::vector<std::unique_ptr<Announcer>>& announcers, Probe& probe,
                   RegistryLoadResult* r) {
  std::vector<int64_t> refreshes0;
  for (auto& a : announcers) refreshes0.push_back(a->refreshes.load());
  double cpu0 = 0;
  for (int m = 0; m < o.members; ++m) cpu0 += CpuSeconds(etcd.pid(m));
  {
    std::lock_guard<std::mutex> lock(probe.mu);
    probe.measuring = true;
  }
  const auto w0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(absl::ToInt64Milliseconds(o.steady)));
  const double window = std::chrono::duration<double>(Clock::now() - w0).count();
  {
    std::lock_guard<std::mutex> lock(probe.mu);
    probe.measuring = false;
    r->events_per_s = static_cast<double>(probe.events) / window * o.prefill;
    r->update_latency_p50_ms = Percentile(probe.latency_ms, 0.50);
    r->update_latency_p99_ms = Percentile(probe.latency_ms, 0.99);
  }
  double cpu1 = 0, rss = 0;
  for (int m = 0; m < o.members; ++m) {
    cpu1 += CpuSeconds(etcd.pid(m));
    rss += RssMib(etcd.pid(m));
  }
  int64_t refreshes = 0;
  double bytes = 0;
  for (size_t i = 0; i < announcers.size(); ++i) {
    refreshes += announcers[i]->refreshes.load() - refreshes0[i];
    bytes += static_cast<double>(announcers[i]->bytes);
  }
  // Every refresh renews the lease and, the load having changed, writes the value.
  r->keepalives_per_s = static_cast<double>(refreshes) / window;
  r->puts_per_s = r->keepalives_per_s;
  r->announcement_bytes = bytes / static_cast<double>(announcers.size());
  r->etcd_cpu_percent = (cpu1 - cpu0) / window * 100;
  r->etcd_rss_mib = rss;
}

}  // namespace

nlohmann::json RegistryLoadResult::ToJson(const RegistryLoadOptions& o) const {
  return {{"decode", o.decode},
          {"prefill", o.prefill},
          {"etcd_members", o.members},
          {"lease_s", absl::ToDoubleSeconds(o.lease)},
          {"steady_s", absl::ToDoubleSeconds(o.steady)},
          {"join_all_s", join_all_s},
          {"announcement_bytes", announcement_bytes},
          {"puts_per_s", puts_per_s},
          {"keepalives_per_s", keepalives_per_s},
          {"events_per_s", events_per_s},
          {"update_latency_p50_ms", update_latency_p50_ms},
          {"update_latency_p99_ms", update_latency_p99_ms},
          {"etcd_cpu_percent", etcd_cpu_percent},
          {"etcd_rss_mib", etcd_rss_mib}};
}

absl::StatusOr<RegistryLoadResult> RunRegistryLoad(const RegistryLoadOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  EtcdClusterOptions eo;
  eo.members = o.members;
  eo.dir = o.dir;
  say(absl::StrCat("starting a ", o.members, "-member etcd"));
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd = EtcdCluster::Start(eo);
  if (!etcd.ok()) return etcd.status();
  const std::string endpoints = (*etcd)->endpoints();

  say(absl::StrCat("starting ", o.prefill, " watchers"));
  std::vector<std::unique_ptr<Watcher>> watchers;
  for (int i = 0; i < o.prefill; ++i) watchers.push_back(MakeWatcher(endpoints));
  for (auto& w : watchers) {
    if (!w->membership->WaitSynced(absl::Seconds(30)))
      return absl::DeadlineExceededError("a watcher did not sync");
  }
  Probe probe;
  probe.client = Client(endpoints);
  absl::StatusOr<rpc::EtcdRange> start = probe.client->GetPrefix(rpc::EtcdDecodePrefix(kPrefix));
  if (!start.ok()) return start.status();
  StartProbe(probe, start->revision);

  say(absl::StrCat("starting ", o.decode, " announcers"));
  std::vector<std::unique_ptr<Announcer>> announcers;
  for (int i = 0; i < o.decode; ++i) announcers.push_back(MakeAnnouncer(endpoints, i, o.lease));
  const auto t0 = Clock::now();
  std::vector<std::thread> starting;
  for (auto& a : announcers)
    starting.emplace_back([&a] { (void)a->announcer->Start(absl::Seconds(30)); });
  for (std::thread& t : starting) t.join();
  auto all_seen = [&] {
    for (auto& w : watchers) {
      if (w->registry->LiveInstanceCount(kModel) != o.decode) return false;
    }
    return true;
  };
  while (!all_seen()) {
    if (Clock::now() - t0 > std::chrono::seconds(60))
      return absl::DeadlineExceededError("not every watcher saw every announcer within 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  RegistryLoadResult r;
  r.join_all_s = std::chrono::duration<double>(Clock::now() - t0).count();

  say(absl::StrCat("steady state for ", absl::FormatDuration(o.steady)));
  MeasureSteady(o, **etcd, announcers, probe, &r);

  say("stopping");
  probe.cancel.Cancel();
  probe.thread.join();
  for (auto& w : watchers) w->membership->Shutdown();
  for (auto& a : announcers) a->announcer->Shutdown();
  return r;
}

}  // namespace scd::cluster
