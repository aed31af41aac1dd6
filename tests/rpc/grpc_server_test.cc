// StartGrpcServer owns its port: a second server, or a gRPC server on a port that a plain
// socket already listens on, is refused with an error naming the address, and the first one
// keeps serving. (gRPC's default SO_REUSEPORT would have let both bind.)
#include "common/rpc/grpc_server.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "tests/rpc/rpc_test_support.h"

namespace scd::rpc::testing {
namespace {

// True when a channel to `address` becomes READY within 5 s.
bool Connects(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  return channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

}  // namespace

TEST_CASE("A gRPC server refuses a port another server listens on", "[cpu][rpc]") {
  std::unique_ptr<ControlPlaneServer> first = ControlPlaneServer::Start(MakeRegistryOptions());
  auto registry = DecodeRegistry::Create(MakeRegistryOptions());
  REQUIRE(registry.ok());
  ControlPlaneService service(registry->get());
  GrpcServerOptions options;
  options.address = first->address();
  absl::StatusOr<GrpcServer> second = StartGrpcServer(options, {&service});
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(second.status().message()),
             Catch::Contains(first->address()) && Catch::Contains("already in use"));
  CHECK(Connects(first->address()));  // the first one is untouched
}

TEST_CASE("A gRPC server refuses a port a plain socket listens on", "[cpu][rpc]") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0);
  REQUIRE(listen(fd, 4) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));

  auto registry = DecodeRegistry::Create(MakeRegistryOptions());
  REQUIRE(registry.ok());
  ControlPlaneService service(registry->get());
  GrpcServerOptions options;
  options.address = taken;
  absl::StatusOr<GrpcServer> server = StartGrpcServer(options, {&service});
  CHECK_FALSE(server.ok());
  CHECK_THAT(std::string(server.status().message()), Catch::Contains(taken));
  close(fd);
  // Once the port is free it can be had.
  server = StartGrpcServer(options, {&service});
  INFO(server.status().ToString());
  REQUIRE(server.ok());
  CHECK(server->address == taken);
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace scd::rpc::testing
