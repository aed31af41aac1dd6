// ControlPlaneService: scd.v1 messages <-> DecodeRegistry calls, absl::Status -> grpc::Status.
#include "common/rpc/control_plane_service.h"

#include "common/rpc/status_translation.h"

namespace scd::rpc {

grpc::Status ControlPlaneService::Register(grpc::ServerContext* /*context*/,
                                           const scd::v1::RegisterRequest* request,
                                           scd::v1::RegisterResponse* response) {
  DecodeInstanceInfo info;
  info.instance_id = request->instance_id();
  info.model_name = request->model_name();
  info.pair_digest = request->pair_digest();
  info.capacity = request->capacity();
  info.data_plane_address = request->data_plane_address();
  info.rpc_address = request->rpc_address();
  absl::StatusOr<RegisterOutcome> outcome = registry_->Register(info, request->cluster_token());
  if (!outcome.ok()) return ToGrpcStatus(outcome.status());
  response->set_accepted(true);
  response->set_reason(outcome->refreshed ? "re-registered" : "registered");
  response->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(outcome->heartbeat_interval));
  response->set_lease_ms(absl::ToInt64Milliseconds(outcome->lease));
  return grpc::Status::OK;
}

grpc::Status ControlPlaneService::Heartbeat(grpc::ServerContext* /*context*/,
                                            const scd::v1::HeartbeatRequest* request,
                                            scd::v1::HeartbeatResponse* response) {
  absl::StatusOr<bool> known =
      registry_->Heartbeat(request->instance_id(), request->cluster_token(),
                           request->active_requests(), request->queue_depth());
  if (!known.ok()) return ToGrpcStatus(known.status());
  response->set_ok(*known);
  response->set_reregister(!*known);
  return grpc::Status::OK;
}

grpc::Status ControlPlaneService::Deregister(grpc::ServerContext* /*context*/,
                                             const scd::v1::DeregisterRequest* request,
                                             scd::v1::DeregisterResponse* response) {
  absl::StatusOr<bool> removed =
      registry_->Deregister(request->instance_id(), request->cluster_token());
  if (!removed.ok()) return ToGrpcStatus(removed.status());
  response->set_removed(*removed);
  return grpc::Status::OK;
}

}  // namespace scd::rpc
