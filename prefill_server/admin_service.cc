// See admin_service.h.
#include "prefill_server/admin_service.h"

#include "common/daemon/event_log.h"
#include "common/rpc/status_translation.h"

namespace scd {

absl::StatusOr<std::unique_ptr<AdminService>> AdminService::Create(
    PayloadSender* sender, double gbps, const rpc::PeerAuthenticator* auth,
    std::string cluster_token, metrics::Registry* metrics) {
  std::unique_ptr<AdminService> s(new AdminService(sender, gbps, auth, std::move(cluster_token)));
  absl::StatusOr<metrics::CounterFamily*> refused = metrics->AddCounterFamily(
      "scd_admin_rejected_total",
      "Admin API calls refused for their client certificate or cluster token, by reason.",
      {"reason"});
  if (!refused.ok()) return refused.status();
  s->refusals_ = std::make_unique<daemon::RefusalLog>("admin_call_refused", *refused);
  absl::StatusOr<metrics::Gauge*> gauge =
      metrics->AddGauge("scd_data_plane_bandwidth_gbps",
                        "The data plane's emulated bandwidth cap in Gbit/s (0: unlimited).");
  if (!gauge.ok()) return gauge.status();
  s->gauge_ = *gauge;
  s->gauge_->Set(gbps);
  return s;
}

grpc::Status AdminService::SetLinkBandwidth(grpc::ServerContext* context,
                                            const scd::v1::SetLinkBandwidthRequest* request,
                                            scd::v1::SetLinkBandwidthResponse* response) {
  if (auth_ != nullptr) {
    grpc::Status admitted = auth_->Check(*context, cluster_token_, refusals_.get());
    if (!admitted.ok()) return admitted;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status st = sender_->SetBandwidthGbps(request->gbps()); !st.ok()) {
    return rpc::ToGrpcStatus(st);
  }
  response->set_previous_gbps(gbps_);
  response->set_gbps(request->gbps());
  daemon::LogInfo("link_bandwidth_changed",
                  {{"previous_gbps", gbps_}, {"gbps", request->gbps()}, {"peer", context->peer()}});
  gbps_ = request->gbps();
  gauge_->Set(gbps_);
  return grpc::Status::OK;
}

}  // namespace scd
