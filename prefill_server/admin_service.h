// AdminService: the prefill daemon's scd.v1.Admin gRPC service, for operators and benchmarks
// acting on a running daemon. SetLinkBandwidth changes the data plane's emulated bandwidth cap
// (data_plane.bandwidth_gbps) from now on, for every decode daemon's connection, so that a
// benchmark can slow a link down or speed it up mid-run and watch `mode: auto` follow.
//
// Callers are admitted like Decode calls (peer_auth.h): a client certificate of the cluster's
// CA under mutual TLS, and the cluster token in the `scd-cluster-token` metadata; a refusal is
// logged (`admin_call_refused`, with the peer's address) and counted in
// scd_admin_rejected_total{reason}. Each change is logged (`link_bandwidth_changed`) and shows
// in the gauge scd_data_plane_bandwidth_gbps (0: unlimited).
#ifndef SCD_PREFILL_SERVER_ADMIN_SERVICE_H_
#define SCD_PREFILL_SERVER_ADMIN_SERVICE_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "common/daemon/refusal_log.h"
#include "common/metrics/registry.h"
#include "common/rpc/peer_auth.h"
#include "prefill_server/payload_sender.h"
#include "proto/scd.grpc.pb.h"

namespace scd {

class AdminService final : public scd::v1::Admin::Service {
 public:
  // `sender` carries the data plane, whose cap starts at `gbps`; `auth` may be null (no checks:
  // in-process tests). Registers the service's metrics in `metrics`.
  static absl::StatusOr<std::unique_ptr<AdminService>> Create(PayloadSender* sender, double gbps,
                                                              const rpc::PeerAuthenticator* auth,
                                                              std::string cluster_token,
                                                              metrics::Registry* metrics);

  grpc::Status SetLinkBandwidth(grpc::ServerContext* context,
                                const scd::v1::SetLinkBandwidthRequest* request,
                                scd::v1::SetLinkBandwidthResponse* response) override;

 private:
  AdminService(PayloadSender* sender, double gbps, const rpc::PeerAuthenticator* auth,
               std::string cluster_token)
      : sender_(sender), gbps_(gbps), auth_(auth), cluster_token_(std::move(cluster_token)) {}

  PayloadSender* const sender_;
  std::mutex mu_;  // one change at a time, so that previous_gbps is the one replaced
  double gbps_;
  const rpc::PeerAuthenticator* const auth_;
  const std::string cluster_token_;
  std::unique_ptr<daemon::RefusalLog> refusals_;
  metrics::Gauge* gauge_ = nullptr;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_ADMIN_SERVICE_H_
