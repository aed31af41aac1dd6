// Starting a gRPC server on one address with the project's credentials and limits. Both
// daemons host several services on one port (the prefill daemon: ControlPlane and
// Generation; a decode daemon: Decode), so this takes a list. Port 0 picks a free port, which
// the result reports (tests bind 127.0.0.1:0).
#ifndef SCD_COMMON_RPC_GRPC_SERVER_H_
#define SCD_COMMON_RPC_GRPC_SERVER_H_

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace scd::rpc {

struct GrpcServerOptions {
  // "host:port"; port 0 picks a free one.
  std::string address = "127.0.0.1:0";
  // Insecure when null (see MakeServerCredentials).
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // Largest message either way (inline SCD payloads can exceed gRPC's 4 MB default).
  int max_message_bytes = 64 << 20;
};

struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;         // the bound port
  std::string address;  // "host:port" with the bound port
};

// Registers `services` (not owned; they must outlive the server) and starts serving.
// Unavailable naming the address when it cannot be bound.
absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServerOptions& options,
                                           const std::vector<grpc::Service*>& services);

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_GRPC_SERVER_H_
