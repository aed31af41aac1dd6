// ControlPlaneService: the scd.v1.ControlPlane gRPC service on the prefill daemon, a thin
// edge over DecodeRegistry. It converts messages to registry calls and absl::Status to
// grpc::Status (the only place the control plane does, docs/STYLE.md "Errors"); refusals travel as
// gRPC errors whose message is the registry's reason.
//
// Every refused call (a caller without a valid client certificate under mutual TLS, the wrong
// cluster token, another pair's digest, a model not served here, a malformed registration) is
// recorded with the caller's address in the guard's RefusalLog: the control_plane_refused log
// line and scd_registry_rejected_total{reason}.
#ifndef SCD_COMMON_RPC_CONTROL_PLANE_SERVICE_H_
#define SCD_COMMON_RPC_CONTROL_PLANE_SERVICE_H_

#include <string>

#include "common/daemon/refusal_log.h"
#include "common/metrics/registry.h"
#include "common/rpc/decode_registry.h"
#include "common/rpc/peer_auth.h"
#include "proto/scd.grpc.pb.h"

namespace scd::rpc {

// scd_registry_rejected_total{reason}: decode daemons refused by the control plane or by the
// etcd watch (etcd_registry.h). Registers the family in `registry`.
absl::StatusOr<metrics::CounterFamily*> AddRegistryRejected(metrics::Registry* registry);

// The reason label of a registry refusal: token, digest, model or malformed.
std::string RegistryRefusalReason(const absl::Status& refusal);

struct ControlPlaneGuard {
  // Checks callers' certificates (mutual TLS); null: none are checked.
  const PeerAuthenticator* auth = nullptr;
  // Where refusals are recorded; null: nowhere (tests).
  daemon::RefusalLog* refusals = nullptr;
};

class ControlPlaneService final : public scd::v1::ControlPlane::Service {
 public:
  // `registry` and the guard's members are not owned and must outlive the service.
  explicit ControlPlaneService(DecodeRegistry* registry, ControlPlaneGuard guard = {})
      : registry_(registry), guard_(guard) {}

  grpc::Status Register(grpc::ServerContext* context, const scd::v1::RegisterRequest* request,
                        scd::v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const scd::v1::HeartbeatRequest* request,
                         scd::v1::HeartbeatResponse* response) override;
  grpc::Status Deregister(grpc::ServerContext* context, const scd::v1::DeregisterRequest* request,
                          scd::v1::DeregisterResponse* response) override;

 private:
  // The caller's certificate; a refusal is recorded and returned.
  grpc::Status Admit(const grpc::ServerContext& context) const;
  // Records a registry refusal of the caller and returns it.
  grpc::Status Refuse(const grpc::ServerContext& context, const absl::Status& refusal,
                      const std::string& instance_id) const;

  DecodeRegistry* const registry_;
  const ControlPlaneGuard guard_;
};

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_CONTROL_PLANE_SERVICE_H_
