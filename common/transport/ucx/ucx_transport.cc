// The UCX Transport: one UcxWorker (context, worker, progress thread) per Transport, shared
// by its listeners and connections, which keep it alive as long as they exist.
#include "common/transport/ucx/ucx_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transport/bandwidth_limiter.h"
#include "common/transport/ucx/ucx_connection.h"
#include "common/transport/ucx/ucx_listener.h"
#include "common/transport/ucx/ucx_worker.h"

namespace scd::transport {
namespace {

class UcxTransport : public Transport {
 public:
  UcxTransport(const TransportOptions& options, std::shared_ptr<UcxWorker> worker,
               std::shared_ptr<BandwidthLimiter> limiter)
      : options_(options), worker_(std::move(worker)), limiter_(std::move(limiter)) {}

  absl::StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    return ListenUcx(worker_, address, options_);
  }

  absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                      absl::Time deadline) override {
    return ConnectUcx(worker_, address, deadline, options_, limiter_);
  }

  const char* name() const override { return "ucx"; }

  absl::Status SetBandwidthGbps(double gbps) override { return limiter_->SetGbps(gbps); }

 private:
  const TransportOptions options_;
  const std::shared_ptr<UcxWorker> worker_;
  const std::shared_ptr<BandwidthLimiter> limiter_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(const TransportOptions& options) {
  SCD_RETURN_IF_ERROR(ValidateOptions(options));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<BandwidthLimiter> limiter,
                       BandwidthLimiter::Create(options.bandwidth_gbps));
  auto worker = UcxWorker::Create(options.ucx_transports);
  if (!worker.ok()) {
    return absl::UnavailableError(
        absl::StrCat("UCX transport unavailable on this host: ", worker.status().message()));
  }
  return std::unique_ptr<Transport>(new UcxTransport(
      options, std::move(*worker), std::shared_ptr<BandwidthLimiter>(std::move(limiter))));
}

}  // namespace scd::transport
