// Starting a gRPC server on one address with the project's credentials and limits. Both
// daemons host several services on one port (the prefill daemon: ControlPlane and
// Generation; a decode daemon: Decode), so this takes a list. Port 0 picks a free port, which
// the result reports (tests bind 127.0.0.1:0). A port already in use is refused.
#ifndef SCD_COMMON_RPC_GRPC_SERVER_H_
#define SCD_COMMON_RPC_GRPC_SERVER_H_

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace scd::rpc {

struct GrpcServerOptions {
  // "host:port"; port 0 picks a free one.
  std::string address = "127.0.0.1:0";
  // Insecure when null (see MakeServerCredentials).
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Largest message either way (inline SCD payloads can exceed gRPC's 4 MB default).
  int max_message_bytes = 64 << 20;
  // HTTP/2 keepalive towards clients (see ChannelOptions): a call whose client vanished (link
  // down, host dead) is cancelled within about keepalive_time + keepalive_timeout, so a
  // decode daemon stops generating for a prefill daemon it can no longer reach. Zero: off.
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Client PINGs closer together than this (without data) count as abuse; gRPC's default
  // (5 min) would make the server hang up on any client with a shorter keepalive_time.
  absl::Duration min_ping_interval = absl::Seconds(1);
};

struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;         // the bound port
  std::string address;  // "host:port" with the bound port
};

// Registers `services` (not owned; they must outlive the server) and starts serving.
// Unavailable naming the address when it cannot be bound, also when another process (or
// another server here) already listens on it: the port is never shared (no SO_REUSEPORT).
absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServerOptions& options,
                                           const std::vector<grpc::Service*>& services);

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_GRPC_SERVER_H_
