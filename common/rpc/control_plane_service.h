// ControlPlaneService: the scd.v1.ControlPlane gRPC service on the prefill daemon, a thin
// edge over DecodeRegistry. It converts messages to registry calls and absl::Status to
// grpc::Status (the only place the control plane does, docs/STYLE.md "Errors"); refusals travel as
// gRPC errors whose message is the registry's reason.
#ifndef SCD_COMMON_RPC_CONTROL_PLANE_SERVICE_H_
#define SCD_COMMON_RPC_CONTROL_PLANE_SERVICE_H_

#include "common/rpc/decode_registry.h"
#include "proto/scd.grpc.pb.h"

namespace scd::rpc {

class ControlPlaneService final : public scd::v1::ControlPlane::Service {
 public:
  // `registry` is not owned and must outlive the service.
  explicit ControlPlaneService(DecodeRegistry* registry) : registry_(registry) {}

  grpc::Status Register(grpc::ServerContext* context, const scd::v1::RegisterRequest* request,
                        scd::v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const scd::v1::HeartbeatRequest* request,
                         scd::v1::HeartbeatResponse* response) override;
  grpc::Status Deregister(grpc::ServerContext* context, const scd::v1::DeregisterRequest* request,
                          scd::v1::DeregisterResponse* response) override;

 private:
  DecodeRegistry* const registry_;
};

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_CONTROL_PLANE_SERVICE_H_
