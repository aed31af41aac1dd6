// Every listening port is exclusive: a second scd-prefill or scd-decode started on a port the
// first one serves (gRPC, data plane, HTTP) exits 1 with an error naming the address, and the
// first pair keeps serving with one decode daemon registered, not two.
#include <catch2/catch.hpp>
#include <string>

#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;

// Runs `binary` on `config` until it exits; checks exit code 1 and that its start_failed
// event names `address` and `reason`.
void ExpectPortRefused(const std::string& binary, const std::string& dir, const json& config,
                       const std::string& tag, const std::string& address,
                       const std::string& reason = "in use") {
  std::string log;
  const std::optional<int> rc = RunToExit(binary, dir, config, tag, &log);
  INFO(tag << ": " << log);
  CHECK(rc == std::optional<int>(1));
  CHECK(log.find("\"start_failed\"") != std::string::npos);
  CHECK(log.find(address) != std::string::npos);
  CHECK(log.find(reason) != std::string::npos);
}

}  // namespace

TEST_CASE("A second daemon on a port already in use exits 1 naming the address", "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  DecodeHandle decode = StartDecode(dir, DecodeConfig(prefill.grpc_address));
  REQUIRE(WaitForReady(prefill.http_port, 200, std::chrono::seconds(10)));
  auto started = decode.process->WaitForEvent("decode_started", std::chrono::seconds(1));
  REQUIRE(started.ok());
  const std::string decode_rpc = (*started)["rpc_address"].get<std::string>();
  const std::string data_plane = (*started)["data_plane"].get<std::string>();  // tcp://host:port
  REQUIRE(data_plane.rfind("tcp://", 0) == 0);

  {  // The prefill daemon's gRPC port (control plane and Generation).
    json c = PrefillConfig("scd");
    c["grpc"]["listen"] = prefill.grpc_address;
    ExpectPortRefused("scd-prefill", dir, c, "prefill-same-grpc", prefill.grpc_address);
  }
  {  // The prefill daemon's HTTP port (the HTTP server words its own reason).
    json c = PrefillConfig("scd");
    c["http"]["port"] = prefill.http_port;
    ExpectPortRefused("scd-prefill", dir, c, "prefill-same-http",
                      "127.0.0.1:" + std::to_string(prefill.http_port), "cannot listen");
  }
  {  // A decode daemon's gRPC port: the second must not register beside the first.
    json c = DecodeConfig(prefill.grpc_address);
    c["grpc"]["listen"] = decode_rpc;
    ExpectPortRefused("scd-decode", dir, c, "decode-same-grpc", decode_rpc);
  }
  {  // A decode daemon's data-plane port.
    json c = DecodeConfig(prefill.grpc_address);
    c["data_plane"]["listen"] = data_plane.substr(6);
    ExpectPortRefused("scd-decode", dir, c, "decode-same-data-plane", data_plane);
  }
  // The first pair is untouched: one decode daemon registered, and it serves. The gauge is
  // refreshed once a second, so it is read until it has caught up (or 5 s pass).
  const std::string series = "scd_decode_instances{model=\"stories260K-babi-qa\"}";
  std::optional<double> instances;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    instances = MetricValue(HttpGet(prefill.http_port, "/metrics").body, series);
  } while (instances != std::optional<double>(1) && std::chrono::steady_clock::now() < deadline);
  CHECK(instances == std::optional<double>(1));
  const json body = {{"model", "stories260K-babi-qa"},
                     {"prompt", "Mary went"},
                     {"max_tokens", 4},
                     {"temperature", 0}};
  CHECK(HttpPost(prefill.http_port, "/v1/completions", body.dump()).status == 200);
}

}  // namespace scd::testing
