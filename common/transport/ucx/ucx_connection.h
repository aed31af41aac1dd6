// The sending end of a UCX connection: a client-server UCP endpoint to a UcxListener. Send
// runs FrameSender on the caller's thread, which hands each write to the progress thread and
// waits for its completion; the progress thread keeps one stream receive posted for the
// receiver's HELLO and ACK frames. A write that misses its deadline force-closes the endpoint
// and waits for UCX to release the caller's buffer before returning.
#ifndef SCD_COMMON_TRANSPORT_UCX_UCX_CONNECTION_H_
#define SCD_COMMON_TRANSPORT_UCX_UCX_CONNECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/transport/bandwidth_limiter.h"
#include "common/transport/transport.h"
#include "common/transport/ucx/ucx_worker.h"

namespace scd::transport {

// Connects to "ucx://host:port" and waits for the receiver's HELLO before `deadline`.
absl::StatusOr<std::unique_ptr<Connection>> ConnectUcx(std::shared_ptr<UcxWorker> worker,
                                                       const std::string& address,
                                                       absl::Time deadline,
                                                       const TransportOptions& options,
                                                       std::shared_ptr<BandwidthLimiter> limiter);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_UCX_UCX_CONNECTION_H_
