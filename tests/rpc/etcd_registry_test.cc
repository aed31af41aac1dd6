// The etcd registry against a real etcd (Debian's etcd-server) on loopback: the client's
// calls, lease-bound announcements, the prefill side's membership (admission by token and
// pair digest), endpoint failover and etcd auth.
#include "common/rpc/etcd_registry.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "common/base/file_io.h"
#include "common/rpc/etcd_client.h"
#include "common/tools/cluster/etcd_cluster.h"
#include "nlohmann/json.hpp"
#include "tests/rpc/rpc_test_support.h"
#include "tests/rpc/tls_fixtures.h"
#include "tests/test_support.h"

namespace scd::rpc {
namespace {

using cluster::EtcdCluster;
using cluster::EtcdClusterOptions;

const std::string kEtcdDigest(64, 'a');

std::unique_ptr<EtcdCluster> StartEtcd(int members) {
  if (!EtcdCluster::Available()) FAIL("etcd not found on PATH: run scripts/setup.sh (etcd-server)");
  EtcdClusterOptions o;
  o.members = members;
  o.dir = scd::testing::TempDir();
  absl::StatusOr<std::unique_ptr<EtcdCluster>> c = EtcdCluster::Start(o);
  REQUIRE(c.ok());
  return std::move(*c);
}

std::unique_ptr<EtcdClient> Client(const std::string& endpoints, const std::string& user = "",
                                   const std::string& password = "") {
  EtcdOptions o;
  o.endpoints = ParseEtcdEndpoints(endpoints).value();
  o.user = user;
  o.password = password;
  o.rpc_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Create(o);
  REQUIRE(c.ok());
  return std::move(*c);
}

DecodeInstanceInfo Instance(const std::string& id) {
  return {id, "babi", kEtcdDigest, 4, "tcp://127.0.0.1:7201", "127.0.0.1:7101"};
}

// Polls `pred` until true or `timeout` (the state under test changes on another thread).
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

TEST_CASE("etcd endpoints are parsed and checked", "[cpu]") {
  CHECK(ParseEtcdEndpoints("http://a:1, http://b:2/").value() ==
        std::vector<std::string>{"http://a:1", "http://b:2"});
  CHECK(ParseEtcdEndpoints("").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ParseEtcdEndpoints("a:1").status().message().find("http://") != std::string::npos);
  CHECK(ParseEtcdEndpoints("http://a").status().message().find("host:port") != std::string::npos);
  CHECK(ParseEtcdEndpoints("http://a:1,https://b:2").status().message().find("mix") !=
        std::string::npos);
  CHECK(EtcdPrefixEnd("/scd/") == "/scd0");
}

TEST_CASE("announcements carry a MAC of the cluster token", "[cpu]") {
  const std::string v = EncodeDecodeAnnouncement(Instance("d1"), {2, 1, 8}, "secret");
  absl::StatusOr<DecodeAnnouncement> a = ParseDecodeAnnouncement(v, "secret");
  REQUIRE(a.ok());
  CHECK(a->info.instance_id == "d1");
  CHECK(a->info.capacity == 4);
  CHECK(a->load.active_requests == 2);
  CHECK(a->load.batch_slots == 8);
  // batch_slots is optional (0: inferred), but no other type.
  nlohmann::json without = nlohmann::json::parse(v);
  without.erase("batch_slots");
  absl::StatusOr<DecodeAnnouncement> old = ParseDecodeAnnouncement(without.dump(), "secret");
  REQUIRE(old.ok());
  CHECK(old->load.batch_slots == 0);
  without["batch_slots"] = "8";
  CHECK(ParseDecodeAnnouncement(without.dump(), "secret").status().code() ==
        absl::StatusCode::kInvalidArgument);
  // Stage rates are optional; present, they must be positive numbers.
  LoadReport rated{2, 1, 8};
  rated.rates.rebuild_seconds_per_token = {{"scd", 3e-5}};
  rated.rates.prefill_seconds_per_token = 6e-5;
  absl::StatusOr<DecodeAnnouncement> with_rates =
      ParseDecodeAnnouncement(EncodeDecodeAnnouncement(Instance("d1"), rated, "secret"), "secret");
  REQUIRE(with_rates.ok());
  CHECK(with_rates->load.rates.rebuild_seconds_per_token.at("scd") == 3e-5);
  CHECK(with_rates->load.rates.prefill_seconds_per_token == 6e-5);
  CHECK(old->load.rates.rebuild_seconds_per_token.empty());
  nlohmann::json bad_rate = nlohmann::json::parse(v);
  bad_rate["rebuild_seconds_per_token"] = {{"scd", -1}};
  absl::StatusOr<DecodeAnnouncement> refused = ParseDecodeAnnouncement(bad_rate.dump(), "secret");
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.status().message()),
             Catch::Contains("rebuild_seconds_per_token.scd"));
  CHECK(ParseDecodeAnnouncement(v, "other").status().code() == absl::StatusCode::kPermissionDenied);
  CHECK(ParseDecodeAnnouncement("{", "secret").status().code() ==
        absl::StatusCode::kInvalidArgument);
  std::string forged = v;
  forged.replace(forged.find("7101"), 4, "9999");  // another address, same MAC
  CHECK(ParseDecodeAnnouncement(forged, "secret").status().code() ==
        absl::StatusCode::kPermissionDenied);
}

TEST_CASE("the etcd client puts, reads, watches and leases keys", "[cpu][etcd]") {
  auto etcd = StartEtcd(1);
  auto client = Client(etcd->endpoints());
  REQUIRE(client->Put("/t/a", "1").ok());
  REQUIRE(client->Put("/t/b", "2").ok());
  REQUIRE(client->Put("/u/c", "3").ok());
  absl::StatusOr<EtcdRange> range = client->GetPrefix("/t/");
  REQUIRE(range.ok());
  REQUIRE(range->kvs.size() == 2);
  CHECK(range->kvs[1].value == "2");

  std::vector<EtcdEvent> seen;
  EtcdWatchCancel cancel;
  std::thread watcher([&] {
    absl::Status st = client->Watch(
        "/t/", range->revision + 1,
        [&](const std::vector<EtcdEvent>& events) {
          for (const EtcdEvent& e : events) seen.push_back(e);
          if (seen.size() >= 2) cancel.Cancel();
        },
        &cancel);
    CHECK(st.code() == absl::StatusCode::kCancelled);
  });
  absl::StatusOr<int64_t> lease = client->Grant(absl::Seconds(2));
  REQUIRE(lease.ok());
  REQUIRE(client->Put("/t/leased", "x", *lease).ok());
  REQUIRE(client->Revoke(*lease).ok());  // deletes the key
  watcher.join();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].type == EtcdEvent::Type::kPut);
  CHECK(seen[1].type == EtcdEvent::Type::kDelete);
  CHECK(seen[1].key == "/t/leased");
  CHECK(client->KeepAlive(*lease).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("membership admits announced decode daemons and refuses the rest", "[cpu][etcd]") {
  auto etcd = StartEtcd(1);
  auto client = Client(etcd->endpoints());
  DecodeRegistryOptions ro;
  ro.cluster_token = "secret";
  ro.expected_pair_digests = {{"babi", kEtcdDigest}};
  ro.lease = absl::InfiniteDuration();
  ro.failure_quarantine = absl::Seconds(5);
  auto registry = DecodeRegistry::Create(ro).value();
  metrics::Registry metrics;
  EtcdMetrics em(&metrics);
  EtcdMembershipOptions mo;
  mo.prefix = "/scd";
  mo.cluster_token = "secret";
  mo.metrics = &em;
  EtcdDecodeMembership membership(client.get(), registry.get(), mo);

  // One announced before the watch starts (read in the snapshot), the rest after.
  EtcdAnnouncerOptions ao;
  ao.key = EtcdDecodeKey("/scd", "babi", "good");
  ao.value = [] { return EncodeDecodeAnnouncement(Instance("good"), {}, "secret"); };
  ao.lease = absl::Seconds(2);
  ao.refresh = absl::Milliseconds(500);
  auto good = EtcdAnnouncer::Create(client.get(), ao).value();
  REQUIRE(good->Start(absl::Seconds(10)).ok());
  membership.Start();
  REQUIRE(membership.WaitSynced(absl::Seconds(10)));
  CHECK(registry->LiveInstanceCount("babi") == 1);

  testing::StderrCapture captured;  // the refusals' log lines
  DecodeInstanceInfo wrong_digest = Instance("wrong-digest");
  wrong_digest.pair_digest = std::string(64, 'b');
  REQUIRE(client
              ->Put(EtcdDecodeKey("/scd", "babi", "wrong-digest"),
                    EncodeDecodeAnnouncement(wrong_digest, {}, "secret"))
              .ok());
  REQUIRE(client
              ->Put(EtcdDecodeKey("/scd", "babi", "wrong-token"),
                    EncodeDecodeAnnouncement(Instance("wrong-token"), {}, "guess"))
              .ok());
  REQUIRE(client->Put(EtcdDecodeKey("/scd", "babi", "junk"), "not json").ok());
  REQUIRE(Eventually([&] {
    auto r = membership.rejected();
    return r["digest"] == 1 && r["token"] == 1 && r["malformed"] == 1;
  }));
  captured.Restore();
  CHECK(registry->LiveInstanceCount("babi") == 1);
  CHECK(metrics.Render().find("scd_registry_rejected_total{reason=\"digest\"} 1") !=
        std::string::npos);
  // The announcement made with another token: one line naming the key, the address it
  // claims, and the reason; one count.
  CHECK(metrics.Render().find("scd_registry_rejected_total{reason=\"token\"} 1") !=
        std::string::npos);
  int token_lines = 0;
  for (const nlohmann::json& line : captured.Lines("decode_announcement_rejected")) {
    if (line.value("reason", "") != "token") continue;
    ++token_lines;
    CHECK(line.value("key", "") == EtcdDecodeKey("/scd", "babi", "wrong-token"));
    CHECK(line.value("rpc_address", "") == Instance("wrong-token").rpc_address);
  }
  CHECK(token_lines == 1);

  // The lease's end (the announcer revokes it on shutdown) removes the instance.
  good->Shutdown();
  REQUIRE(Eventually([&] { return registry->LiveInstanceCount("babi") == 0; }));
}

TEST_CASE("a killed etcd member costs the client one try on another endpoint",
          "[cpu][etcd][slow]") {
  auto etcd = StartEtcd(3);
  auto client = Client(etcd->endpoints());
  REQUIRE(client->Put("/f/a", "1").ok());
  const std::string first = client->current_endpoint();
  int current = 0;
  for (int i = 0; i < etcd->size(); ++i) {
    if (etcd->endpoint(i) == first) current = i;
  }
  etcd->Kill(current);
  // When the killed member led, the other two elect a leader first: the cluster's time, not
  // the client's (on a loaded host it outlasted the client's two tries). The client still
  // starts at the dead member.
  REQUIRE(etcd->WaitHealthy(std::chrono::seconds(30)).ok());
  CHECK(client->current_endpoint() == first);
  REQUIRE(client->Put("/f/b", "2").ok());
  CHECK(client->current_endpoint() != first);
  absl::StatusOr<EtcdRange> range = client->GetPrefix("/f/");
  REQUIRE(range.ok());
  CHECK(range->kvs.size() == 2);
}

TEST_CASE("etcd auth: the right password writes, a wrong one is refused clearly", "[cpu][etcd]") {
  if (!scd::testing::CommandExists("etcdctl"))
    FAIL("etcdctl not found: run scripts/setup.sh (etcd-client)");
  auto etcd = StartEtcd(1);
  const std::string ctl = "ETCDCTL_API=3 etcdctl --endpoints=" + etcd->endpoints() + " ";
  for (const std::string& cmd :
       {std::string("user add root:rootpw"), std::string("user add scd:scdpw"),
        std::string("role add scd"),
        std::string("role grant-permission scd --prefix=true readwrite /scd/"),
        std::string("user grant-role scd scd"), std::string("auth enable")}) {
    scd::testing::CommandResult r = scd::testing::RunCommand(ctl + cmd + " 2>&1");
    INFO(cmd << ": " << r.output);
    REQUIRE(r.exit_code == 0);
  }
  auto good = Client(etcd->endpoints(), "scd", "scdpw");
  CHECK(good->Put("/scd/x", "1").ok());
  absl::Status outside = good->Put("/other", "1");
  CHECK(outside.code() == absl::StatusCode::kPermissionDenied);
  auto bad = Client(etcd->endpoints(), "scd", "wrong");
  absl::Status st = bad->Put("/scd/y", "1");
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(st.message()).find("authentication failed") != std::string::npos);
  auto anonymous = Client(etcd->endpoints());
  CHECK_FALSE(anonymous->Put("/scd/z", "1").ok());
}

TEST_CASE("etcd over TLS with client certificates: the certificate gets in, none is refused",
          "[cpu][etcd]") {
  if (!EtcdCluster::Available()) FAIL("etcd not found on PATH: run scripts/setup.sh (etcd-server)");
  const std::string dir = scd::testing::TempDir();
  TlsPaths server{dir + "/ca.pem", dir + "/server.pem", dir + "/server.key"};
  TlsPaths client{dir + "/ca.pem", dir + "/client.pem", dir + "/client.key"};
  REQUIRE(WriteFileAtomically(server.ca_cert, testing::kTestCaPem).ok());
  REQUIRE(WriteFileAtomically(server.cert, testing::kTestServerCertPem).ok());
  REQUIRE(WriteFileAtomically(server.key, testing::kTestServerKeyPem).ok());
  REQUIRE(WriteFileAtomically(client.cert, testing::kTestClientCertPem).ok());
  REQUIRE(WriteFileAtomically(client.key, testing::kTestClientKeyPem).ok());
  EtcdClusterOptions o;
  o.dir = dir;
  o.server_tls = server;
  o.client_tls = client;
  absl::StatusOr<std::unique_ptr<EtcdCluster>> etcd = EtcdCluster::Start(o);
  INFO(etcd.status().ToString());
  REQUIRE(etcd.ok());
  REQUIRE((*etcd)->endpoints().rfind("https://", 0) == 0);
  auto make = [&](const TlsPaths& tls) {
    EtcdOptions eo;
    eo.endpoints = ParseEtcdEndpoints((*etcd)->endpoints()).value();
    eo.tls = tls;
    eo.rpc_timeout = absl::Seconds(2);
    return EtcdClient::Create(eo).value();
  };
  CHECK(make(client)->Put("/scd/tls", "1").ok());
  absl::Status without = make(TlsPaths{server.ca_cert, "", ""})->Put("/scd/tls", "2");
  CHECK_FALSE(without.ok());
  // An https endpoint without TLS settings is a configuration error, found at creation.
  EtcdOptions plain;
  plain.endpoints = {"http://127.0.0.1:1"};
  plain.tls = client;
  CHECK(EtcdClient::Create(plain).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scd::rpc
