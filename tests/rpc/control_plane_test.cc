// The control plane over real gRPC on 127.0.0.1: ControlPlaneClient registering and
// heartbeating against ControlPlaneService, refusals carried as gRPC errors with their
// reasons, lease expiry and re-registration, deregistration, recovery after the control
// plane restarts on the same port, and many clients at once.
#include <grpcpp/create_channel.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "common/rpc/control_plane_client.h"
#include "common/rpc/status_translation.h"
#include "tests/rpc/rpc_test_support.h"

namespace scd::rpc {
namespace {

using testing::ControlPlaneServer;
using testing::FakeClock;
using testing::kDigest;
using testing::kModel;
using testing::kOtherDigest;
using testing::kToken;
using testing::MakeInstance;
using testing::MakeRegistryOptions;
using testing::WaitFor;

ControlPlaneClientOptions ClientOptions(const std::string& target, const std::string& id) {
  ControlPlaneClientOptions options;
  options.target = target;
  options.instance = MakeInstance(id);
  options.cluster_token = kToken;
  options.rpc_timeout = absl::Seconds(2);
  options.initial_backoff = absl::Milliseconds(20);
  options.max_backoff = absl::Milliseconds(200);
  options.channel.initial_reconnect_backoff = absl::Milliseconds(50);
  options.channel.max_reconnect_backoff = absl::Milliseconds(200);
  return options;
}

std::unique_ptr<ControlPlaneClient> MakeClient(ControlPlaneClientOptions options) {
  absl::StatusOr<std::unique_ptr<ControlPlaneClient>> client =
      ControlPlaneClient::Create(std::move(options));
  REQUIRE(client.ok());
  return *std::move(client);
}

// Registry options for tests on real time: a lease of 20 heartbeats, so that a loaded
// machine (sanitizers, parallel builds) does not expire a live client by accident.
DecodeRegistryOptions RealTimeOptions() {
  DecodeRegistryOptions options = MakeRegistryOptions();
  options.lease = absl::Seconds(1);
  return options;
}

bool HasInstance(DecodeRegistry& registry, const std::string& id) {
  for (const DecodeInstanceStatus& status : registry.Instances()) {
    if (status.info.instance_id == id) return true;
  }
  return false;
}

TEST_CASE("Client registers, heartbeats its load, and the server routes to it", "[cpu]") {
  auto server = ControlPlaneServer::Start(RealTimeOptions());
  std::atomic<int> active{2};  // 2 busy + 1 queued of capacity 4
  ControlPlaneClientOptions options = ClientOptions(server->address(), "decode-1");
  options.load_report = [&] {
    LoadReport r{active.load(), 1};
    r.rates.rebuild_seconds_per_token = {{"scd", 2e-5}};
    r.rates.prefill_seconds_per_token = 8e-5;
    return r;
  };
  auto client = MakeClient(std::move(options));
  REQUIRE(client->Start(absl::Seconds(5)).ok());
  CHECK(client->registered());
  CHECK(client->registrations() == 1);
  CHECK(client->heartbeat_interval() == absl::Milliseconds(50));

  // A heartbeat carries the load report.
  REQUIRE(WaitFor([&] {
    std::vector<DecodeInstanceStatus> instances = server->registry->Instances();
    return instances.size() == 1 && instances[0].reported_active == 2 &&
           instances[0].reported_queue_depth == 1;
  }));
  // ... and the stage rates it measured.
  const DecodeInstanceStatus reported = server->registry->Instances().at(0);
  CHECK(reported.rates.rebuild_seconds_per_token.at("scd") == 2e-5);
  CHECK(reported.rates.prefill_seconds_per_token == 8e-5);
  absl::StatusOr<DecodeLease> lease = server->registry->Pick(kModel);
  INFO(lease.status().ToString());
  REQUIRE(lease.ok());
  CHECK(lease->route().instance_id == "decode-1");
  // 2 + 1 reported + this lease = capacity: the next request has nowhere to go.
  CHECK(server->registry->Pick(kModel).status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(lease->route().rpc_address == MakeInstance("decode-1").rpc_address);

  // Heartbeats keep the 1 s lease alive past it.
  absl::SleepFor(absl::Milliseconds(1300));
  CHECK(server->registry->LiveInstanceCount(kModel) == 1);
  CHECK(client->registrations() == 1);

  // Shutdown deregisters at once.
  client->Shutdown();
  CHECK_FALSE(client->registered());
  CHECK(server->registry->Instances().empty());
}

TEST_CASE("A wrong cluster token is refused over gRPC with the reason", "[cpu]") {
  auto server = ControlPlaneServer::Start(MakeRegistryOptions());
  ControlPlaneClientOptions options = ClientOptions(server->address(), "decode-1");
  options.cluster_token = "guess";
  auto client = MakeClient(std::move(options));
  absl::Status status = client->Start(absl::Seconds(5));
  REQUIRE(status.code() == absl::StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(status.message()), Catch::Contains("cluster token"));
  CHECK_FALSE(client->registered());
  CHECK(server->registry->Instances().empty());
}

TEST_CASE("A wrong pair digest is refused over gRPC naming both digests", "[cpu]") {
  auto server = ControlPlaneServer::Start(MakeRegistryOptions());
  ControlPlaneClientOptions options = ClientOptions(server->address(), "decode-1");
  options.instance.pair_digest = kOtherDigest;
  auto client = MakeClient(std::move(options));
  absl::Status status = client->Start(absl::Seconds(5));
  REQUIRE(status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(status.message()), Catch::Contains(kDigest));
  CHECK_THAT(std::string(status.message()), Catch::Contains(kOtherDigest));
  CHECK(server->registry->Instances().empty());
}

TEST_CASE("The service answers the raw protocol as documented", "[cpu]") {
  auto server = ControlPlaneServer::Start(MakeRegistryOptions());
  auto stub = scd::v1::ControlPlane::NewStub(
      grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));

  scd::v1::HeartbeatRequest heartbeat;
  heartbeat.set_instance_id("never-registered");
  heartbeat.set_cluster_token(kToken);
  scd::v1::HeartbeatResponse heartbeat_reply;
  {
    grpc::ClientContext context;
    REQUIRE(stub->Heartbeat(&context, heartbeat, &heartbeat_reply).ok());
  }
  CHECK_FALSE(heartbeat_reply.ok());
  CHECK(heartbeat_reply.reregister());

  scd::v1::RegisterRequest request;
  request.set_model_name(kModel);
  request.set_pair_digest(kDigest);
  request.set_capacity(2);
  request.set_data_plane_address("ucx://127.0.0.1:5001");
  request.set_rpc_address("127.0.0.1:6001");
  request.set_cluster_token(kToken);
  request.set_instance_id("raw-1");
  for (const char* reason : {"registered", "re-registered"}) {
    scd::v1::RegisterResponse reply;
    grpc::ClientContext context;
    REQUIRE(stub->Register(&context, request, &reply).ok());
    CHECK(reply.accepted());
    CHECK(reply.reason() == reason);
    CHECK(reply.heartbeat_interval_ms() == 50);
    CHECK(reply.lease_ms() == 500);
  }
  CHECK(server->registry->Instances().size() == 1);

  request.set_capacity(0);
  {
    scd::v1::RegisterResponse reply;
    grpc::ClientContext context;
    grpc::Status status = stub->Register(&context, request, &reply);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(FromGrpcStatus(status).code() == absl::StatusCode::kInvalidArgument);
  }

  scd::v1::DeregisterRequest deregister;
  deregister.set_instance_id("raw-1");
  deregister.set_cluster_token(kToken);
  for (bool removed : {true, false}) {
    scd::v1::DeregisterResponse reply;
    grpc::ClientContext context;
    REQUIRE(stub->Deregister(&context, deregister, &reply).ok());
    CHECK(reply.removed() == removed);
  }
}

TEST_CASE("Lease expiry drops a silent instance; a live client re-registers", "[cpu]") {
  FakeClock clock;
  DecodeRegistryOptions registry_options = MakeRegistryOptions();
  registry_options.clock = clock.AsFunction();
  auto server = ControlPlaneServer::Start(registry_options);
  auto client = MakeClient(ClientOptions(server->address(), "alive"));
  REQUIRE(client->Start(absl::Seconds(5)).ok());
  // "silent" registers once and never heartbeats.
  REQUIRE(server->registry->Register(MakeInstance("silent"), kToken).ok());
  CHECK(server->registry->LiveInstanceCount(kModel) == 2);

  // Jump past the lease: both entries are stale at once. The live client's next heartbeat is
  // told to re-register, and does; the silent one stays gone.
  clock.Advance(absl::Seconds(1));
  REQUIRE(WaitFor([&] {
    std::vector<DecodeInstanceStatus> instances = server->registry->Instances();
    // The server admits before the client has counted the reply: wait for both.
    return instances.size() == 1 && instances[0].info.instance_id == "alive" &&
           client->registrations() >= 2;
  }));
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<DecodeLease> lease = server->registry->Pick(kModel);
    REQUIRE(lease.ok());
    CHECK(lease->route().instance_id == "alive");
  }

  // MarkFailed takes the live one out of routing even though it keeps heartbeating.
  server->registry->MarkFailed("alive");
  absl::SleepFor(absl::Milliseconds(150));
  CHECK(server->registry->Pick(kModel).status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("Client re-registers after the control plane restarts on the same port", "[cpu]") {
  auto server = ControlPlaneServer::Start(RealTimeOptions());
  const std::string address = server->address();
  auto client = MakeClient(ClientOptions(address, "decode-1"));
  REQUIRE(client->Start(absl::Seconds(5)).ok());
  REQUIRE(client->registrations() == 1);

  // The prefill daemon goes away: heartbeats fail, the client backs off and retries.
  server.reset();
  REQUIRE(WaitFor([&] { return !client->registered(); }));
  CHECK_FALSE(client->last_error().ok());
  absl::SleepFor(absl::Milliseconds(300));

  // It comes back on the same port with an empty registry.
  server = ControlPlaneServer::Start(RealTimeOptions(), address);
  REQUIRE(WaitFor([&] { return HasInstance(*server->registry, "decode-1"); }));
  REQUIRE(WaitFor([&] { return client->registered() && client->registrations() >= 2; }));
  CHECK(server->registry->Pick(kModel).ok());
}

// The real service, except that the next `cancel_heartbeats` heartbeats are answered
// CANCELLED, as a server that is shutting down answers the calls it still has in flight.
class CancellingControlPlane final : public scd::v1::ControlPlane::Service {
 public:
  explicit CancellingControlPlane(ControlPlaneService* inner) : inner_(inner) {}

  grpc::Status Register(grpc::ServerContext* context, const scd::v1::RegisterRequest* request,
                        scd::v1::RegisterResponse* response) override {
    return inner_->Register(context, request, response);
  }
  grpc::Status Heartbeat(grpc::ServerContext* context, const scd::v1::HeartbeatRequest* request,
                         scd::v1::HeartbeatResponse* response) override {
    int left = cancel_heartbeats.load();
    while (left > 0 && !cancel_heartbeats.compare_exchange_weak(left, left - 1)) {
    }
    if (left > 0) {
      ++cancelled;
      return grpc::Status(grpc::StatusCode::CANCELLED, "server is shutting down");
    }
    return inner_->Heartbeat(context, request, response);
  }
  grpc::Status Deregister(grpc::ServerContext* context, const scd::v1::DeregisterRequest* request,
                          scd::v1::DeregisterResponse* response) override {
    return inner_->Deregister(context, request, response);
  }

  std::atomic<int> cancel_heartbeats{0};
  std::atomic<int> cancelled{0};

 private:
  ControlPlaneService* const inner_;
};

TEST_CASE("A heartbeat the server cancels is a failure to recover from, not a shutdown", "[cpu]") {
  // A prefill daemon that restarts cancels the heartbeat it is serving. The client once took
  // that CANCELLED for its own Shutdown and stopped heartbeating for good.
  absl::StatusOr<std::unique_ptr<DecodeRegistry>> registry =
      DecodeRegistry::Create(RealTimeOptions());
  REQUIRE(registry.ok());
  ControlPlaneService inner(registry->get());
  CancellingControlPlane service(&inner);
  absl::StatusOr<GrpcServer> server = StartGrpcServer(GrpcServerOptions(), {&service});
  REQUIRE(server.ok());
  {
    auto client = MakeClient(ClientOptions(server->address, "decode-1"));
    REQUIRE(client->Start(absl::Seconds(5)).ok());
    REQUIRE(client->registrations() == 1);

    service.cancel_heartbeats = 1;
    REQUIRE(WaitFor([&] { return service.cancelled.load() == 1; }));
    // It registers again at once and goes on heartbeating: past two leases it is still live.
    REQUIRE(WaitFor([&] { return client->registrations() >= 2 && client->registered(); }));
    absl::SleepFor(absl::Seconds(2));
    CHECK(client->registered());
    CHECK((*registry)->LiveInstanceCount(kModel) == 1);
    CHECK((*registry)->Pick(kModel).ok());
  }
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->server->Wait();
}

TEST_CASE("Start gives up with Unavailable when no control plane answers", "[cpu]") {
  // Bind a server to learn a free port, then stop it so nothing listens there.
  std::string address;
  {
    auto server = ControlPlaneServer::Start(MakeRegistryOptions());
    address = server->address();
  }
  auto client = MakeClient(ClientOptions(address, "decode-1"));
  const absl::Time start = absl::Now();
  absl::Status status = client->Start(absl::Milliseconds(400));
  CHECK(absl::Now() - start < absl::Seconds(5));
  REQUIRE(status.code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(status.message()), Catch::Contains(address));

  // Shutdown from another thread interrupts a long Start.
  auto waiting = MakeClient(ClientOptions(address, "decode-2"));
  absl::Status waited;
  std::thread starter([&] { waited = waiting->Start(absl::Seconds(60)); });
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time stop = absl::Now();
  waiting->Shutdown();
  starter.join();
  CHECK(absl::Now() - stop < absl::Seconds(3));
  CHECK(waited.code() == absl::StatusCode::kCancelled);
}

TEST_CASE("Client options are validated", "[cpu]") {
  ControlPlaneClientOptions options = ClientOptions("", "x");
  CHECK(ControlPlaneClient::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options = ClientOptions("127.0.0.1:1", "x");
  options.max_backoff = absl::Milliseconds(1);
  CHECK(ControlPlaneClient::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Many clients register and the server routes concurrently", "[cpu]") {
  auto server = ControlPlaneServer::Start(RealTimeOptions());
  constexpr int kClients = 6;
  std::vector<std::unique_ptr<ControlPlaneClient>> clients(kClients);
  std::vector<absl::Status> started(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    clients[i] = MakeClient(ClientOptions(server->address(), "decode-" + std::to_string(i)));
  }
  std::atomic<bool> done{false};
  std::atomic<int> picks{0};
  std::vector<std::thread> pickers;
  for (int p = 0; p < 3; ++p) {
    pickers.emplace_back([&] {
      while (!done) {
        if (server->registry->Pick(kModel).ok()) ++picks;
        std::this_thread::yield();
      }
    });
  }
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] { started[i] = clients[i]->Start(absl::Seconds(10)); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : started) CHECK(status.ok());
  CHECK(server->registry->LiveInstanceCount(kModel) == kClients);
  absl::SleepFor(absl::Milliseconds(200));
  done = true;
  for (std::thread& picker : pickers) picker.join();
  CHECK(picks > 0);
  for (const DecodeInstanceStatus& status : server->registry->Instances()) {
    CHECK(status.in_flight == 0);
  }
  // Shutting down in parallel deregisters everyone.
  threads.clear();
  for (int i = 0; i < kClients; ++i) threads.emplace_back([&, i] { clients[i]->Shutdown(); });
  for (std::thread& thread : threads) thread.join();
  CHECK(server->registry->Instances().empty());
}

}  // namespace
}  // namespace scd::rpc
