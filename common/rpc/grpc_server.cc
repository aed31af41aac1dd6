// StartGrpcServer: ServerBuilder with our credentials and message limits; a failed bind
// becomes an error naming the address instead of a null server. The port is exclusive: gRPC
// sets SO_REUSEPORT by default, which lets a second daemon bind a port already serving and
// share its connections (and a second decode daemon register beside the first), so it is off.
#include "common/rpc/grpc_server.h"

#include <grpcpp/server_builder.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace scd::rpc {

absl::StatusOr<GrpcServer> StartGrpcServer(const GrpcServerOptions& options,
                                           const std::vector<grpc::Service*>& services) {
  const size_t colon = options.address.rfind(':');
  if (colon == std::string::npos || colon + 1 == options.address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gRPC listen address '", options.address, "' is not host:port"));
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      options.address,
      options.credentials ? options.credentials : grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  auto ms = [](absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); };
  if (options.keepalive_time > absl::ZeroDuration()) {
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ms(options.keepalive_time));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms(options.keepalive_timeout));
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  // Clients (the other daemon) ping idle connections on purpose; accept it at their rate.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             ms(options.min_ping_interval));
  for (grpc::Service* service : services) builder.RegisterService(service);
  GrpcServer result;
  result.server = builder.BuildAndStart();
  if (result.server == nullptr || port == 0) {
    if (result.server != nullptr) result.server->Shutdown();
    return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", options.address,
                                               ": the address is already in use (another "
                                               "daemon?) or is not one of this host's"));
  }
  result.port = port;
  result.address = absl::StrCat(options.address.substr(0, colon + 1), port);
  return result;
}

}  // namespace scd::rpc
