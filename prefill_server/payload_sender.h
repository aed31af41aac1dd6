// PayloadSender: the prefill daemon's side of the data plane. It keeps one connection per
// decode daemon address (connecting on first use), sends a payload under a transfer id and
// returns once the receiver verified it (transport.h). A connection that fails for any reason
// but a corrupted frame (which the connection survives) is dropped, so the next send to that
// daemon reconnects — a restarted decode daemon is picked up without intervention. A connect
// waits at most `connect_timeout` (not the whole request deadline), so a daemon behind a dead
// link costs one timeout and leaves time to retry on another replica.
#ifndef SCD_PREFILL_SERVER_PAYLOAD_SENDER_H_
#define SCD_PREFILL_SERVER_PAYLOAD_SENDER_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/transport/transport.h"

namespace scd {

class PayloadSender {
 public:
  // `transport` is owned.
  explicit PayloadSender(std::unique_ptr<transport::Transport> transport,
                         absl::Duration connect_timeout = absl::Seconds(30))
      : transport_(std::move(transport)), connect_timeout_(connect_timeout) {}

  // Sends `bytes` to `address` ("tcp://..." or "ucx://...") with the transfer's token, which
  // its Decode call must name. Errors are the transport's, annotated with the address.
  absl::Status Send(const std::string& address, uint64_t transfer_id,
                    const transport::TransferToken& token, absl::Span<const uint8_t> bytes,
                    absl::Time deadline);

  // The data plane's emulated bandwidth cap from now on (Transport::SetBandwidthGbps).
  absl::Status SetBandwidthGbps(double gbps) { return transport_->SetBandwidthGbps(gbps); }

  // Drops every connection (shutdown).
  void CloseAll();

 private:
  absl::StatusOr<std::shared_ptr<transport::Connection>> ConnectionTo(const std::string& address,
                                                                      absl::Time deadline);
  void Drop(const std::string& address, const transport::Connection* connection);

  std::unique_ptr<transport::Transport> transport_;
  const absl::Duration connect_timeout_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<transport::Connection>> connections_;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_PAYLOAD_SENDER_H_
