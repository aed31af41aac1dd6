// Shared pieces of the tests/rpc tests: a fake clock for lease expiry, polling with a timeout
// for background threads, the event log captured from stderr, and a control-plane server
// (registry + service + real gRPC server on 127.0.0.1) that tests can stop and restart on the
// same port.
#ifndef SCD_TESTS_RPC_RPC_TEST_SUPPORT_H_
#define SCD_TESTS_RPC_RPC_TEST_SUPPORT_H_

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/rpc/control_plane_service.h"
#include "common/rpc/decode_registry.h"
#include "common/rpc/grpc_server.h"
#include "nlohmann/json.hpp"
#include "tests/test_support.h"

namespace scd::rpc::testing {

inline constexpr char kToken[] = "cluster-secret";
inline constexpr char kModel[] = "specialist-a";
inline constexpr char kDigest[] = "00112233445566778899aabbccddeeff";
inline constexpr char kOtherDigest[] = "ffeeddccbbaa99887766554433221100";

// A settable clock; starts at a fixed instant so that expiry arithmetic is reproducible.
class FakeClock {
 public:
  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  std::function<absl::Time()> AsFunction() {
    return [this] { return Now(); };
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

// Polls `condition` every 10 ms until it holds (true) or `timeout` passes (false).
inline bool WaitFor(const std::function<bool()>& condition,
                    absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return condition();
}

// Sends this process's stderr (the event log) to a file while it lives; Lines() parses what
// was written, one JSON object per line.
class StderrCapture {
 public:
  StderrCapture() : path_(scd::testing::TempDir() + "/stderr.log") {
    fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    const int file = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(dup2(file, STDERR_FILENO) == STDERR_FILENO);
    close(file);
  }
  ~StderrCapture() { Restore(); }
  // The lines written so far whose "event" is `event`.
  std::vector<nlohmann::json> Lines(const std::string& event) const {
    std::vector<nlohmann::json> lines;
    std::istringstream text(scd::testing::ReadFileOrFail(path_));
    for (std::string line; std::getline(text, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.value("event", "") == event) lines.push_back(std::move(j));
    }
    return lines;
  }
  void Restore() {
    if (saved_ < 0) return;
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }

 private:
  std::string path_;
  int saved_ = -1;
};

inline DecodeInstanceInfo MakeInstance(const std::string& id, int capacity = 4,
                                       const std::string& model = kModel,
                                       const std::string& digest = kDigest) {
  DecodeInstanceInfo info;
  info.instance_id = id;
  info.model_name = model;
  info.pair_digest = digest;
  info.capacity = capacity;
  info.data_plane_address = "tcp://127.0.0.1:7000";
  info.rpc_address = "127.0.0.1:" + std::to_string(8000 + static_cast<int>(id.size()));
  return info;
}

inline DecodeRegistryOptions MakeRegistryOptions() {
  DecodeRegistryOptions options;
  options.cluster_token = kToken;
  options.expected_pair_digests[kModel] = kDigest;
  options.heartbeat_interval = absl::Milliseconds(50);
  options.lease = absl::Milliseconds(500);
  return options;
}

// Registry + ControlPlaneService + gRPC server. Stops the server on destruction.
struct ControlPlaneServer {
  std::unique_ptr<DecodeRegistry> registry;
  std::unique_ptr<ControlPlaneService> service;
  GrpcServer grpc;

  static std::unique_ptr<ControlPlaneServer> Start(
      DecodeRegistryOptions options, const std::string& address = "127.0.0.1:0",
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr,
      ControlPlaneGuard guard = {}) {
    auto result = std::make_unique<ControlPlaneServer>();
    absl::StatusOr<std::unique_ptr<DecodeRegistry>> registry =
        DecodeRegistry::Create(std::move(options));
    REQUIRE(registry.ok());
    result->registry = *std::move(registry);
    result->service = std::make_unique<ControlPlaneService>(result->registry.get(), guard);
    GrpcServerOptions server_options;
    server_options.address = address;
    server_options.credentials = std::move(credentials);
    absl::StatusOr<GrpcServer> server = StartGrpcServer(server_options, {result->service.get()});
    INFO(server.status().ToString());
    REQUIRE(server.ok());
    result->grpc = *std::move(server);
    return result;
  }

  std::string address() const { return grpc.address; }

  ~ControlPlaneServer() {
    if (grpc.server) {
      grpc.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      grpc.server->Wait();
    }
  }
};

}  // namespace scd::rpc::testing

#endif  // SCD_TESTS_RPC_RPC_TEST_SUPPORT_H_
