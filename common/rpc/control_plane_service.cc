// ControlPlaneService: scd.v1 messages <-> DecodeRegistry calls, absl::Status -> grpc::Status,
// and every refusal recorded with the caller's address.
#include "common/rpc/control_plane_service.h"

#include <cmath>

#include "common/rpc/status_translation.h"

namespace scd::rpc {

absl::StatusOr<metrics::CounterFamily*> AddRegistryRejected(metrics::Registry* registry) {
  return registry->AddCounterFamily(
      "scd_registry_rejected_total",
      "Decode daemons refused by the control plane or the etcd watch (never routed to), by "
      "reason: no_certificate, untrusted_certificate (mutual TLS), token, digest, model, "
      "malformed.",
      {"reason"});
}

std::string RegistryRefusalReason(const absl::Status& refusal) {
  switch (refusal.code()) {
    case absl::StatusCode::kPermissionDenied:
      return "token";
    case absl::StatusCode::kFailedPrecondition:
      return "digest";
    case absl::StatusCode::kNotFound:
      return "model";
    default:
      return "malformed";
  }
}

grpc::Status ControlPlaneService::Admit(const grpc::ServerContext& context) const {
  if (guard_.auth == nullptr) return grpc::Status::OK;
  return guard_.auth->Check(context, /*cluster_token=*/"", guard_.refusals);
}

grpc::Status ControlPlaneService::Refuse(const grpc::ServerContext& context,
                                         const absl::Status& refusal,
                                         const std::string& instance_id) const {
  if (guard_.refusals != nullptr) {
    guard_.refusals->Refuse(context.peer(), RegistryRefusalReason(refusal),
                            std::string(refusal.message()), {{"instance_id", instance_id}});
  }
  return ToGrpcStatus(refusal);
}

grpc::Status ControlPlaneService::Register(grpc::ServerContext* context,
                                           const scd::v1::RegisterRequest* request,
                                           scd::v1::RegisterResponse* response) {
  if (grpc::Status admitted = Admit(*context); !admitted.ok()) return admitted;
  DecodeInstanceInfo info;
  info.instance_id = request->instance_id();
  info.model_name = request->model_name();
  info.pair_digest = request->pair_digest();
  info.capacity = request->capacity();
  info.data_plane_address = request->data_plane_address();
  info.rpc_address = request->rpc_address();
  absl::StatusOr<RegisterOutcome> outcome = registry_->Register(info, request->cluster_token());
  if (!outcome.ok()) return Refuse(*context, outcome.status(), info.instance_id);
  response->set_accepted(true);
  response->set_reason(outcome->refreshed ? "re-registered" : "registered");
  response->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(outcome->heartbeat_interval));
  response->set_lease_ms(absl::ToInt64Milliseconds(outcome->lease));
  return grpc::Status::OK;
}

grpc::Status ControlPlaneService::Heartbeat(grpc::ServerContext* context,
                                            const scd::v1::HeartbeatRequest* request,
                                            scd::v1::HeartbeatResponse* response) {
  if (grpc::Status admitted = Admit(*context); !admitted.ok()) return admitted;
  LoadReport load{request->active_requests(), request->queue_depth(), request->batch_slots()};
  for (const auto& [mode, rate] : request->rebuild_seconds_per_token()) {
    if (std::isfinite(rate) && rate > 0) load.rates.rebuild_seconds_per_token[mode] = rate;
  }
  const double prefill = request->prefill_seconds_per_token();
  load.rates.prefill_seconds_per_token = std::isfinite(prefill) && prefill > 0 ? prefill : 0;
  absl::StatusOr<bool> known =
      registry_->Heartbeat(request->instance_id(), request->cluster_token(), load);
  if (!known.ok()) return Refuse(*context, known.status(), request->instance_id());
  response->set_ok(*known);
  response->set_reregister(!*known);
  return grpc::Status::OK;
}

grpc::Status ControlPlaneService::Deregister(grpc::ServerContext* context,
                                             const scd::v1::DeregisterRequest* request,
                                             scd::v1::DeregisterResponse* response) {
  if (grpc::Status admitted = Admit(*context); !admitted.ok()) return admitted;
  absl::StatusOr<bool> removed =
      registry_->Deregister(request->instance_id(), request->cluster_token());
  if (!removed.ok()) return Refuse(*context, removed.status(), request->instance_id());
  response->set_removed(*removed);
  return grpc::Status::OK;
}

}  // namespace scd::rpc
