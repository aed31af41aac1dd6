// The cluster on etcd, with real processes on loopback: a 3-member etcd (Debian's
// etcd-server), 2 prefill daemons and decode daemons of stories260K-babi-qa, one of them
// with the wrong calibration artifact. One scenario, in order: membership on both prefill
// daemons, kill -9 of a decode replica under 16 greedy streams (migration), kill -9 of an
// etcd member, all of etcd down (and a decode daemon that joins once it is back), a payload
// path that corrupts a byte (oracle fallback), and kill -9 of a prefill daemon.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/tools/cluster/daemon_process.h"
#include "common/tools/cluster/etcd_cluster.h"
#include "tests/daemons/daemon_harness.h"
#include "tests/netfaults/tcp_relay.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kModel[] = "stories260K-babi-qa";

json EtcdControlPlane(const std::string& endpoints) {
  return {{"registry", "etcd"},         {"etcd_endpoints", endpoints},
          {"etcd_prefix", "/scd-test"}, {"cluster_token", "test-token"},
          {"dev_insecure", true},       {"lease", "2s"}};
}

json ClusterPrefill(const std::string& endpoints) {
  json c = PrefillConfig("scd");
  c["control_plane"] = EtcdControlPlane(endpoints);
  c["control_plane"]["heartbeat_interval"] = "500ms";
  c["data_plane"] = {{"peer_timeout", "2s"}};
  // A failed payload path then ends in the oracle fallback rather than a retry elsewhere.
  c["specialists"][0]["max_retries"] = 0;
  return c;
}

json ClusterDecode(const std::string& endpoints, const std::string& artifact = ArtifactPath()) {
  json c = DecodeConfig("");
  c["control_plane"] = EtcdControlPlane(endpoints);
  c["control_plane"]["register_wait"] = "1s";
  c["model"]["artifact"] = artifact;
  c["engine"]["min_step_interval"] = "30ms";  // holds streams mid-way on this small model
  return c;
}

std::string Body(const std::string& prompt, int max_tokens) {
  return json({{"model", kModel},
               {"prompt", prompt},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"stream", true}})
      .dump();
}

std::string Error(const SseResult& s) {
  for (auto it = s.events.rbegin(); it != s.events.rend(); ++it) {
    json j = json::parse(*it, nullptr, false);
    if (!j.is_discarded() && j.contains("error")) return j["error"].value("message", "?");
  }
  return s.status == 200 ? "" : "HTTP " + std::to_string(s.status) + ": " + s.body;
}

// The sum of every sample of a metric family in an exposition.
double MetricSum(const std::string& exposition, const std::string& family) {
  double sum = 0;
  size_t pos = 0;
  while ((pos = exposition.find(family, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || exposition[pos - 1] == '\n';
    const size_t end = exposition.find('\n', pos);
    const std::string line = exposition.substr(pos, end - pos);
    pos = end == std::string::npos ? exposition.size() : end;
    const char next = line.size() > family.size() ? line[family.size()] : ' ';
    if (line_start && (next == '{' || next == ' '))
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

double Instances(int http_port) {
  return MetricValue(HttpGet(http_port, "/metrics").body,
                     "scd_decode_instances{model=\"stories260K-babi-qa\"}")
      .value_or(-1);
}

// Polls `pred` every 20 ms until true or `timeout`; the time it took, or nullopt.
template <typename Pred>
std::optional<milliseconds> Within(milliseconds timeout, Pred pred) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!pred()) {
    if (std::chrono::steady_clock::now() - t0 > timeout) return std::nullopt;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0);
}

bool Logged(cluster::DaemonProcess& p, const std::string& event, const std::string& instance) {
  for (const json& line : p.LogLines()) {
    if (line.value("event", "") == event && line.value("instance_id", "") == instance) return true;
  }
  return false;
}

std::vector<std::string> Prompts(int n) {
  const char* animals[] = {"cat", "dog", "bird", "fish", "frog", "bear", "fox", "owl"};
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(std::string(i % 2 ? "Once upon a time there was a " : "One day a little ") +
                  animals[i % 8] + (i < 8 ? "" : " who liked the sun"));
  }
  return out;
}

// `n` greedy streams at once through `ports` in turn; `during` runs once every stream has
// streamed a token.
std::vector<SseResult> Streams(const std::vector<int>& ports,
                               const std::vector<std::string>& prompts, int max_tokens,
                               const std::function<void()>& during = nullptr) {
  std::atomic<int> started{0};
  std::vector<std::future<SseResult>> futures;
  for (size_t i = 0; i < prompts.size(); ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      bool counted = false;
      return HttpStream(ports[i % ports.size()], "/v1/completions", Body(prompts[i], max_tokens),
                        [&](const std::string&) {
                          if (!counted) {
                            counted = true;
                            ++started;
                          }
                          return true;
                        });
    }));
  }
  if (during) {
    const bool all = Within(seconds(30), [&] {
                       return started.load() == static_cast<int>(prompts.size());
                     }).has_value();
    CHECK(all);
    during();
  }
  std::vector<SseResult> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

// The daemons of the scenario; each phase below leaves them as the next one expects.
struct Cluster {
  std::string dir, endpoints;
  std::unique_ptr<cluster::EtcdCluster> etcd;
  PrefillHandle p1, p2;
  DecodeHandle d1, wrong, d2;
  std::vector<int> ports() const { return {p1.http_port, p2.http_port}; }
};

// Both prefill daemons see both good decode daemons within 2 s of the second's start, refuse
// the one with the wrong artifact, and serve.
void CheckMembership(Cluster& c) {
  auto seen = Within(
      seconds(2), [&] { return Instances(c.p1.http_port) == 2 && Instances(c.p2.http_port) == 2; });
  CHECK(seen.has_value());
  for (int port : c.ports()) {
    CHECK(MetricValue(HttpGet(port, "/metrics").body,
                      "scd_registry_rejected_total{reason=\"digest\"}") == 1);
    CHECK(HttpGet(port, "/ready").status == 200);
    SseResult r = HttpStream(port, "/v1/completions", Body("Once upon a time", 8));
    INFO(Error(r));
    CHECK(r.done());
    CHECK(Error(r).empty());
  }
}

// kill -9 of one decode replica under 16 greedy streams: every stream completes with its
// undisturbed text, and the dead instance leaves both prefill daemons within the lease.
void KillDecodeUnderStreams(Cluster& c) {
  const std::vector<std::string> prompts = Prompts(16);
  std::vector<SseResult> reference = Streams(c.ports(), prompts, 48);
  for (const SseResult& r : reference) REQUIRE(Error(r).empty());
  // The replica with more streams in flight is killed (routing follows load reports that may
  // be a refresh old, so the split between the two is not fixed).
  std::chrono::steady_clock::time_point killed_at;
  DecodeHandle* victim = nullptr;
  std::vector<SseResult> disturbed = Streams(c.ports(), prompts, 48, [&] {
    auto active = [](const DecodeHandle& d) {
      return MetricValue(HttpGet(d.http_port, "/metrics").body, "scd_decode_active_requests")
          .value_or(0);
    };
    victim = active(c.d1) >= active(c.d2) ? &c.d1 : &c.d2;
    killed_at = std::chrono::steady_clock::now();
    victim->process->Signal(SIGKILL);
  });
  REQUIRE(victim != nullptr);
  int errors = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("stream " << i << ": " << Error(disturbed[i]));
    errors += Error(disturbed[i]).empty() ? 0 : 1;
    CHECK(disturbed[i].done());
    CHECK(disturbed[i].Text() == reference[i].Text());
  }
  CHECK(errors == 0);
  const double migrated =
      MetricSum(HttpGet(c.p1.http_port, "/metrics").body, "scd_migrations_total") +
      MetricSum(HttpGet(c.p2.http_port, "/metrics").body, "scd_migrations_total");
  CHECK(migrated >= 1);
  auto removed = Within(seconds(6), [&] {
    return Logged(*c.p1.process, "decode_left", victim->instance_id) &&
           Logged(*c.p2.process, "decode_left", victim->instance_id);
  });
  CHECK(removed.has_value());
  CHECK(std::chrono::steady_clock::now() - killed_at < seconds(2 + 3));  // lease 2 s + slack
}

// kill -9 of one etcd member under load: no request fails.
void KillEtcdMember(Cluster& c) {
  std::vector<SseResult> under_member_loss =
      Streams(c.ports(), Prompts(8), 24, [&] { c.etcd->Kill(0); });
  for (const SseResult& r : under_member_loss) {
    INFO(Error(r));
    CHECK(Error(r).empty());
  }
  REQUIRE(c.etcd->Restart(0).ok());
  REQUIRE(c.etcd->WaitHealthy(seconds(30)).ok());
}

// All of etcd down: requests keep succeeding on the membership last seen. A decode daemon
// started meanwhile (its data plane behind `relay`) joins both prefill daemons once etcd is
// back.
DecodeHandle EtcdDown(Cluster& c, TcpRelay& relay, int data_port) {
  for (int m = 0; m < c.etcd->size(); ++m) c.etcd->Kill(m);
  for (int port : c.ports()) {
    SseResult r = HttpStream(port, "/v1/completions", Body("One day a little fox", 16));
    INFO(Error(r));
    CHECK(Error(r).empty());
  }
  json config = ClusterDecode(c.endpoints);
  config["data_plane"]["listen"] = "127.0.0.1:" + std::to_string(data_port);
  config["data_plane"]["advertise"] = relay.address();
  DecodeHandle d3 = StartDecode(c.dir, config, "decode-3");
  for (int m = 0; m < c.etcd->size(); ++m) REQUIRE(c.etcd->Restart(m).ok());
  REQUIRE(c.etcd->WaitHealthy(seconds(30)).ok());
  auto joined = Within(seconds(15), [&] {
    return Instances(c.p1.http_port) == 2 && Instances(c.p2.http_port) == 2;
  });
  CHECK(joined.has_value());
  return d3;
}

// A payload path that flips a byte: the request succeeds through the oracle fallback, which
// the metric counts.
void FlippedByte(Cluster& c, TcpRelay& relay) {
  relay.ArmCorruption("SCDW", 104);
  const std::vector<std::string> prompts = Prompts(12);
  for (int i = 0; i < 12 && relay.corruptions() == 0; ++i) {
    SseResult r = HttpStream(c.ports()[i % 2], "/v1/completions", Body(prompts[i], 8));
    INFO(Error(r));
    CHECK(Error(r).empty());
  }
  REQUIRE(relay.corruptions() == 1);
  const double fallbacks =
      MetricSum(HttpGet(c.p1.http_port, "/metrics").body, "scd_fallbacks_total") +
      MetricSum(HttpGet(c.p2.http_port, "/metrics").body, "scd_fallbacks_total");
  CHECK(fallbacks == 1);
}

// kill -9 of one prefill daemon: the other keeps serving; the dead one's clients get a
// connection error at once, not a hang.
void KillPrefill(Cluster& c) {
  c.p1.process->Signal(SIGKILL);
  c.p1.process->Wait(seconds(5));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(HttpPost(c.p1.http_port, "/v1/completions", Body("Once", 4)).status == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < seconds(2));
  SseResult r = HttpStream(c.p2.http_port, "/v1/completions", Body("Once upon a time", 8));
  INFO(Error(r));
  CHECK(Error(r).empty());
}

TEST_CASE("a cluster on etcd: membership, migration, etcd failures, fallback, a lost prefill",
          "[cluster][etcd][slow]") {
  if (!cluster::EtcdCluster::Available())
    FAIL("etcd not found on PATH: run scripts/setup.sh (etcd-server)");
  Cluster c;
  c.dir = TempDir();
  cluster::EtcdClusterOptions eo;
  eo.members = 3;
  eo.dir = c.dir;
  auto etcd = cluster::EtcdCluster::Start(eo);
  INFO(etcd.status().ToString());
  REQUIRE(etcd.ok());
  c.etcd = std::move(*etcd);
  c.endpoints = c.etcd->endpoints();
  c.p1 = StartPrefill(c.dir, ClusterPrefill(c.endpoints), "prefill-1");
  c.p2 = StartPrefill(c.dir, ClusterPrefill(c.endpoints), "prefill-2");
  c.d1 = StartDecode(c.dir, ClusterDecode(c.endpoints), "decode-1");
  c.wrong = StartDecode(
      c.dir,
      ClusterDecode(c.endpoints,
                    SourceFile("configs/calibration/stories260K-babi-qa.r24.scd.safetensors")),
      "decode-wrong");
  c.d2 = StartDecode(c.dir, ClusterDecode(c.endpoints), "decode-2");

  CheckMembership(c);
  KillDecodeUnderStreams(c);
  KillEtcdMember(c);
  const int data_port = cluster::PickFreePort().value();
  std::string why;
  auto relay = TcpRelay::Start("", "127.0.0.1", cluster::PickFreePort().value(), "127.0.0.1",
                               data_port, &why);
  REQUIRE(relay != nullptr);
  DecodeHandle d3 = EtcdDown(c, *relay, data_port);
  FlippedByte(c, *relay);
  // The decode daemon with the wrong artifact never got a request.
  CHECK(MetricSum(HttpGet(c.wrong.http_port, "/metrics").body, "scd_decode_requests_total") == 0);
  KillPrefill(c);
}

}  // namespace
}  // namespace scd::testing
