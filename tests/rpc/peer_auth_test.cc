// Mutual TLS judged per call (common/rpc/peer_auth.h) on a real control-plane server on
// loopback, with certificates from scripts/make_test_ca.sh: a client without a certificate,
// one with a certificate of another CA, and one with the right certificate but the wrong
// cluster token are each refused with the reason counted in scd_registry_rejected_total; the
// right certificate and token register. Also the cluster-token policy (cluster_token.h) and
// the metadata a channel adds to every call.
#include "common/rpc/peer_auth.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/rpc/cluster_token.h"
#include "common/rpc/control_plane_client.h"
#include "common/rpc/grpc_server.h"
#include "nlohmann/json.hpp"
#include "tests/rpc/rpc_test_support.h"
#include "tests/test_support.h"

namespace scd::rpc {
namespace {

using testing::ControlPlaneServer;
using testing::kToken;
using testing::MakeInstance;
using testing::MakeRegistryOptions;

// A CA with certificates "prefill" and "decode" in a fresh directory (scripts/make_test_ca.sh).
std::string MakeCa() {
  const std::string dir = scd::testing::TempDir();
  const scd::testing::CommandResult made = scd::testing::RunCommand(
      scd::testing::ShellQuote(scd::testing::SourceFile("scripts/make_test_ca.sh")) + " " +
      scd::testing::ShellQuote(dir));
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  return dir;
}

absl::Status TryRegisterMtls(const std::string& address, const ChannelOptions& channel,
                             const std::string& token = kToken) {
  ControlPlaneClientOptions options;
  options.target = address;
  options.channel = channel;
  options.instance = MakeInstance("mtls-client");
  options.cluster_token = token;
  options.rpc_timeout = absl::Seconds(5);
  options.initial_backoff = absl::Milliseconds(20);
  options.max_backoff = absl::Milliseconds(100);
  absl::StatusOr<std::unique_ptr<ControlPlaneClient>> client = ControlPlaneClient::Create(options);
  if (!client.ok()) return client.status();
  return (*client)->Start(absl::Seconds(2));
}

ChannelOptions Client(const std::string& ca_dir, const std::string& cert_dir, const char* name) {
  ChannelOptions c;
  c.tls.ca_cert = ca_dir + "/ca.pem";
  if (name != nullptr) {
    c.tls.cert = cert_dir + "/" + name + ".pem";
    c.tls.key = cert_dir + "/" + name + ".key";
  }
  c.tls_server_name = "localhost";
  return c;
}

double Rejected(metrics::CounterFamily* family, const std::string& reason) {
  return family->WithLabels({reason}).value()->Value();
}

TEST_CASE("The control plane refuses and counts callers without the cluster's certificate",
          "[cpu]") {
  const std::string cluster = MakeCa();
  const std::string rogue = MakeCa();
  const TlsPaths server{cluster + "/ca.pem", cluster + "/prefill.pem", cluster + "/prefill.key"};
  absl::StatusOr<std::unique_ptr<PeerAuthenticator>> auth = PeerAuthenticator::Create(server);
  REQUIRE(auth.ok());
  CHECK((*auth)->requires_certificate());
  metrics::Registry registry;
  metrics::CounterFamily* rejected = AddRegistryRejected(&registry).value();
  daemon::RefusalLog refusals("control_plane_refused", rejected);
  testing::StderrCapture captured;
  auto cp = ControlPlaneServer::Start(MakeRegistryOptions(), "127.0.0.1:0", (*auth)->credentials(),
                                      ControlPlaneGuard{auth->get(), &refusals});

  absl::Status st = TryRegisterMtls(cp->address(), Client(cluster, cluster, nullptr));
  INFO(st.ToString());
  CHECK(st.code() == absl::StatusCode::kUnauthenticated);
  CHECK_THAT(std::string(st.message()), Catch::Contains("no client certificate"));
  CHECK(Rejected(rejected, "no_certificate") == 1);

  st = TryRegisterMtls(cp->address(), Client(cluster, rogue, "decode"));
  INFO(st.ToString());
  CHECK(st.code() == absl::StatusCode::kUnauthenticated);
  CHECK_THAT(std::string(st.message()), Catch::Contains("not one of this cluster's CA"));
  CHECK(Rejected(rejected, "untrusted_certificate") == 1);

  st = TryRegisterMtls(cp->address(), Client(cluster, cluster, "decode"), "guess");
  CHECK(st.code() == absl::StatusCode::kPermissionDenied);
  CHECK(Rejected(rejected, "token") == 1);
  CHECK(cp->registry->Instances().empty());

  st = TryRegisterMtls(cp->address(), Client(cluster, cluster, "decode"));
  INFO(st.ToString());
  CHECK(st.ok());  // (the client deregisters as it goes out of scope)
  captured.Restore();
  const std::vector<nlohmann::json> lines = captured.Lines("control_plane_refused");
  REQUIRE(lines.size() == 3);
  for (const nlohmann::json& line : lines) {
    INFO(line.dump());
    CHECK(line.value("peer", "").rfind("ipv4:127.0.0.1:", 0) == 0);
    CHECK(line.value("instance_id", "") == (line["reason"] == "token" ? "mtls-client" : ""));
  }
  CHECK(lines[0]["reason"] == "no_certificate");
  CHECK(lines[1]["reason"] == "untrusted_certificate");
  CHECK(lines[2]["reason"] == "token");
  const std::string exposition = registry.Render();
  CHECK_THAT(exposition, Catch::Contains("scd_registry_rejected_total{reason=\"token\"} 1"));
}

TEST_CASE("A refused peer is logged once per host and reason, and counted every time", "[cpu]") {
  CHECK(daemon::PeerHost("ipv4:10.0.0.7:50312") == "ipv4:10.0.0.7");
  CHECK(daemon::PeerHost("ipv6:[::1]:7000") == "ipv6:[::1]");
  CHECK(daemon::PeerHost("tcp://10.0.0.7:41000") == "tcp://10.0.0.7");
  CHECK(daemon::PeerHost("unix:/tmp/x") == "unix:/tmp/x");
  metrics::Registry registry;
  metrics::CounterFamily* family = registry.AddCounterFamily("t_total", "t", {"reason"}).value();
  daemon::RefusalLog log("t_refused", family, absl::Hours(1));
  testing::StderrCapture captured;
  for (int i = 0; i < 5; ++i) log.Refuse("ipv4:10.0.0.7:" + std::to_string(5000 + i), "token", "m");
  log.Refuse("ipv4:10.0.0.8:1", "token", "m");
  log.Refuse("ipv4:10.0.0.8:2", "no_certificate", "m");
  captured.Restore();
  CHECK(family->WithLabels({"token"}).value()->Value() == 6);
  CHECK(family->WithLabels({"no_certificate"}).value()->Value() == 1);
  const std::vector<nlohmann::json> lines = captured.Lines("t_refused");
  REQUIRE(lines.size() == 3);  // one per (host, reason)
  CHECK(lines[0]["event"] == "t_refused");
  CHECK(lines[0]["peer"] == "ipv4:10.0.0.7:5000");
  CHECK(lines[0]["reason"] == "token");
  CHECK(lines[1]["peer"] == "ipv4:10.0.0.8:1");
  CHECK(lines[2]["reason"] == "no_certificate");
}

TEST_CASE("The cluster token must be a secret unless dev_insecure", "[cpu]") {
  for (const std::string& weak :
       {std::string(), std::string(kExampleClusterToken), std::string("test-token")}) {
    const absl::Status st = CheckClusterToken(weak, /*dev_insecure=*/false);
    INFO(weak << ": " << st.ToString());
    CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(st.message()), Catch::Contains("control_plane.cluster_token"));
    CHECK_THAT(std::string(st.message()), Catch::Contains("dev_insecure"));
    CHECK(CheckClusterToken(weak, /*dev_insecure=*/true).ok());
  }
  const std::string strong(kMinClusterTokenBytes, 'x');
  CHECK(CheckClusterToken(strong, false).ok());
  CHECK(ClusterTokenMatches(strong, strong));
  CHECK_FALSE(ClusterTokenMatches(strong, strong + "y"));
  CHECK_FALSE(ClusterTokenMatches(strong, ""));
  CHECK(ClusterTokenMatches("", "anything"));  // an empty token admits any (dev_insecure)
}

// Echoes the cluster token metadata it received as the error message.
class MetadataEcho final : public scd::v1::Decode::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const scd::v1::DecodeRequest*,
                        grpc::ServerWriter<scd::v1::DecodeEvent>*) override {
    auto it = context->client_metadata().find(kClusterTokenMetadata);
    const std::string token = it == context->client_metadata().end()
                                  ? ""
                                  : std::string(it->second.data(), it->second.size());
    return grpc::Status(grpc::StatusCode::ABORTED, token);
  }
};

TEST_CASE("A channel adds its call metadata to every call, plaintext too", "[cpu]") {
  MetadataEcho service;
  absl::StatusOr<GrpcServer> server = StartGrpcServer(GrpcServerOptions{}, {&service});
  REQUIRE(server.ok());
  ChannelOptions options;
  options.call_metadata[kClusterTokenMetadata] = "secret-1";
  auto channel = MakeChannel(server->address, options);
  REQUIRE(channel.ok());
  auto stub = scd::v1::Decode::NewStub(*channel);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    auto reader = stub->Generate(&context, scd::v1::DecodeRequest());
    scd::v1::DecodeEvent event;
    while (reader->Read(&event)) {
    }
    CHECK(reader->Finish().error_message() == "secret-1");
  }
  server->server->Shutdown();
}

}  // namespace
}  // namespace scd::rpc
