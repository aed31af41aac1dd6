// Authenticated daemon-to-daemon traffic, with the real daemons on loopback: a cluster on
// mutual TLS (certificates from scripts/make_test_ca.sh) with a secret cluster token serves a
// chat, and refuses every peer that is not one of its own, each refusal logged with the peer's
// address and reason and counted: decode daemons registering without a certificate, with one
// of another CA, or with the wrong token (control_plane_refused,
// scd_registry_rejected_total); Decode calls without a certificate, with one of another CA or
// without the token (decode_call_refused, scd_decode_rejected_total); data-plane payloads
// without a transfer token or with one their Decode call does not name (payload_refused,
// scd_payload_rejected_total). The cluster keeps serving throughout. Also: both daemons refuse
// to start with an empty or example cluster token unless control_plane.dev_insecure is set.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/rpc/cluster_token.h"
#include "common/rpc/credentials.h"
#include "common/transport/transport.h"
#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// A secret as an operator would make one (`openssl rand -hex 32`), fixed for the test.
constexpr char kSecret[] = "5f0c2b9e41d7a6838e12f4c07b9d5a3e6c1f8b2d4e7a9c0b3d6f8e1a2c4b7d9e";

// A CA with certificates "prefill" and "decode" in a fresh directory.
std::string MakeCa() {
  const std::string dir = TempDir();
  const CommandResult made = scd::testing::RunCommand(
      ShellQuote(SourceFile("scripts/make_test_ca.sh")) + " " + ShellQuote(dir));
  INFO(made.output);
  REQUIRE(made.exit_code == 0);
  return dir;
}

json Tls(const std::string& dir, const std::string& name, const std::string& ca_dir) {
  json t = {{"ca", ca_dir + "/ca.pem"}};
  if (!name.empty()) {
    t["cert"] = dir + "/" + name + ".pem";
    t["key"] = dir + "/" + name + ".key";
  }
  return t;
}

json SecurePrefill(const std::string& ca) {
  json c = PrefillConfig("scd");
  c["control_plane"]["cluster_token"] = kSecret;
  c["control_plane"].erase("dev_insecure");
  c["grpc"]["tls"] = Tls(ca, "prefill", ca);
  c["data_plane"] = {{"decode_tls", Tls(ca, "prefill", ca)}};
  return c;
}

// A decode daemon presenting `cert` (from `cert_dir`; none when empty) and `token`.
json SecureDecode(const std::string& control_plane, const std::string& ca,
                  const std::string& cert_dir, const std::string& cert,
                  const std::string& token = kSecret) {
  json c = DecodeConfig(control_plane);
  c["control_plane"]["cluster_token"] = token;
  c["control_plane"].erase("dev_insecure");
  c["control_plane"]["tls"] = Tls(cert_dir, cert, ca);
  c["control_plane"]["register_wait"] = "5s";
  c["grpc"]["tls"] = Tls(ca, "decode", ca);
  c["data_plane"]["payload_wait"] = "1s";
  return c;
}

// Waits (up to 20 s) for a log line of `event` with `reason`; fails the test without one.
json WaitForRefusal(DaemonProcess& p, const std::string& event, const std::string& reason) {
  const auto until = std::chrono::steady_clock::now() + seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    for (const json& line : p.LogLines()) {
      if (line.value("event", "") == event && line.value("reason", "") == reason) return line;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL("no " << event << " line with reason " << reason << "; log tail:\n" << p.LogTail());
  return {};
}

// The line names the peer by address ("ipv4:127.0.0.1:port" or "tcp://127.0.0.1:port").
void CheckPeer(const json& line) {
  INFO(line.dump());
  CHECK(line.value("peer", "").find("127.0.0.1:") != std::string::npos);
  CHECK_FALSE(line.value("message", "").empty());
}

double MetricOrZero(int http_port, const std::string& series) {
  const HttpResult r = HttpGet(http_port, "/metrics");
  REQUIRE(r.status == 200);
  return MetricValue(r.body, series).value_or(0);
}

// One chat completion through the whole pair; its text.
std::string Chat(int port) {
  const json body = {
      {"model", kModel},
      {"messages", json::array({{{"role", "user"}, {"content", "Mary went home."}}})},
      {"max_tokens", 8},
      {"temperature", 0}};
  const HttpResult r = HttpPost(port, "/v1/chat/completions", body.dump());
  INFO(r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body)["choices"][0]["message"]["content"].get<std::string>();
}

// Decode.Generate on `address` with `channel`; the call's status.
grpc::Status SecurityDecodeCall(const std::string& address, const rpc::ChannelOptions& channel,
                                uint64_t transfer_id = 0,
                                const transport::TransferToken& token = {}) {
  scd::v1::DecodeRequest request;
  request.set_request_id("security-test");
  request.set_model(kModel);
  request.set_max_tokens(4);
  request.add_suffix_token_ids(1);
  if (transfer_id != 0) {
    request.set_transfer_id(transfer_id);
    request.set_transfer_token(token.data(), token.size());
  } else {
    request.set_inline_payload("not a payload");
  }
  return CallDecode(address, channel, request);
}

rpc::ChannelOptions DecodeClient(const std::string& ca, const std::string& cert_dir,
                                 const std::string& cert, bool with_token) {
  rpc::ChannelOptions c;
  c.tls.ca_cert = ca + "/ca.pem";
  if (!cert.empty()) {
    c.tls.cert = cert_dir + "/" + cert + ".pem";
    c.tls.key = cert_dir + "/" + cert + ".key";
  }
  if (with_token) c.call_metadata[rpc::kClusterTokenMetadata] = kSecret;
  return c;
}

// A peer of the data plane that is no prefill daemon: it reaches the port, nothing more.
struct RawSender {
  explicit RawSender(const std::string& data_plane) {
    auto tcp = transport::CreateTransport("tcp");
    REQUIRE(tcp.ok());
    transport = std::move(*tcp);
    auto c = transport->Connect(data_plane, absl::Now() + absl::Seconds(10));
    REQUIRE(c.ok());
    connection = std::move(*c);
  }
  // Sends 4 KiB as transfer `id` with `token`; the receiver acknowledges it (transport.h).
  void Send(uint64_t id, const transport::TransferToken& token) {
    const std::vector<uint8_t> bytes(4096, 0x5a);
    REQUIRE(connection->Send(id, token, bytes, absl::Now() + absl::Seconds(10)).ok());
  }
  // Kept open: a sender that hangs up has its payloads dropped as orphans, not judged.
  std::unique_ptr<transport::Transport> transport;
  std::unique_ptr<transport::Connection> connection;
};

TEST_CASE("A cluster on mutual TLS serves, and refuses every peer that is not its own",
          "[daemons]") {
  const std::string dir = TempDir();
  const std::string ca = MakeCa();
  const std::string rogue = MakeCa();
  PrefillHandle prefill = StartPrefill(dir, SecurePrefill(ca));
  DecodeHandle decode = StartDecode(dir, SecureDecode(prefill.grpc_address, ca, ca, "decode"));
  REQUIRE(WaitForReady(prefill.http_port, 200, seconds(20)));
  CHECK_FALSE(Chat(prefill.http_port).empty());  // mTLS control plane, Decode and data plane

  std::string log;
  SECTION("control plane: no certificate, another CA's, the wrong token") {
    const struct {
      const char* tag;
      std::string cert_dir, cert, token, reason;
    } rogues[] = {{"no-cert", ca, "", kSecret, "no_certificate"},
                  {"rogue-ca", rogue, "decode", kSecret, "untrusted_certificate"},
                  {"wrong-token", ca, "decode", std::string(64, 'f'), "token"}};
    for (const auto& r : rogues) {
      INFO(r.tag);
      const json c = SecureDecode(prefill.grpc_address, ca, r.cert_dir, r.cert, r.token);
      CHECK(RunToExit("scd-decode", dir, c, r.tag, &log) == std::optional<int>(1));
      CHECK(log.find("registration refused") != std::string::npos);
      CheckPeer(WaitForRefusal(*prefill.process, "control_plane_refused", r.reason));
      CHECK(MetricOrZero(prefill.http_port,
                         "scd_registry_rejected_total{reason=\"" + r.reason + "\"}") == 1);
    }
  }
  SECTION("Decode service: no certificate, another CA's, no cluster token") {
    const json started = decode.process->WaitForEvent("decode_started", seconds(1)).value();
    const std::string rpc = started["rpc_address"].get<std::string>();
    const struct {
      rpc::ChannelOptions channel;
      std::string reason;
    } calls[] = {{DecodeClient(ca, ca, "", true), "no_certificate"},
                 {DecodeClient(ca, rogue, "prefill", true), "untrusted_certificate"},
                 {DecodeClient(ca, ca, "prefill", false), "token"}};
    for (const auto& call : calls) {
      INFO(call.reason);
      const grpc::Status st = SecurityDecodeCall(rpc, call.channel);
      CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      CheckPeer(WaitForRefusal(*decode.process, "decode_call_refused", call.reason));
      CHECK(MetricOrZero(decode.http_port,
                         "scd_decode_rejected_total{reason=\"" + call.reason + "\"}") == 1);
    }
  }
  SECTION("data plane: a payload without a token, and one with another call's token") {
    const json started = decode.process->WaitForEvent("decode_started", seconds(1)).value();
    const std::string data_plane = started["data_plane"].get<std::string>();
    const std::string rpc = started["rpc_address"].get<std::string>();
    RawSender rogue(data_plane);
    rogue.Send(77, transport::TransferToken{});
    CheckPeer(WaitForRefusal(*decode.process, "payload_refused", "no_token"));
    CHECK(MetricOrZero(decode.http_port, "scd_payload_rejected_total{reason=\"no_token\"}") == 1);

    // A forged payload under transfer id 78; the authenticated call naming 78 holds another
    // token, so it is refused the forged bytes.
    rogue.Send(78, transport::NewTransferToken());
    const grpc::Status st = SecurityDecodeCall(rpc, DecodeClient(ca, ca, "prefill", true), 78,
                                               transport::NewTransferToken());
    INFO(st.error_message());
    CHECK(st.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    const json line = WaitForRefusal(*decode.process, "payload_refused", "token_mismatch");
    CheckPeer(line);
    CHECK(line.value("transfer_id", 0) == 78);
    CHECK(MetricOrZero(decode.http_port, "scd_payload_rejected_total{reason=\"token_mismatch\"}") ==
          1);
  }
  // Whatever was refused, the pair keeps serving.
  CHECK_FALSE(Chat(prefill.http_port).empty());
  CHECK(decode.process->running());
}

TEST_CASE("Both daemons refuse an empty or example cluster token unless dev_insecure",
          "[daemons]") {
  const std::string dir = TempDir();
  std::string log;
  json prefill = PrefillConfig("scd");
  prefill["control_plane"]["cluster_token"] = rpc::kExampleClusterToken;
  prefill["control_plane"]["dev_insecure"] = false;
  CHECK(RunToExit("scd-prefill", dir, prefill, "prefill-example", &log) == std::optional<int>(1));
  CHECK(log.find("control_plane.cluster_token is the example token") != std::string::npos);
  CHECK(log.find("dev_insecure") != std::string::npos);

  json decode = DecodeConfig("127.0.0.1:1");
  decode["control_plane"]["cluster_token"] = "";
  decode["control_plane"]["dev_insecure"] = false;
  CHECK(RunToExit("scd-decode", dir, decode, "decode-empty", &log) == std::optional<int>(1));
  CHECK(log.find("control_plane.cluster_token is empty") != std::string::npos);

  // With the flag the example token starts (and says it is for development only).
  prefill["control_plane"]["dev_insecure"] = true;
  PrefillHandle p = StartPrefill(dir, prefill, "prefill-dev");
  CHECK(p.process->WaitForEvent("dev_insecure", seconds(1)).ok());
}

}  // namespace
}  // namespace scd::testing
