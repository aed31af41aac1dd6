// The receiving end of the UCX transport: a UCP listener on a socket address. Every accepted
// endpoint runs a small state machine on the progress thread (read header -> read body ->
// verify -> queue -> ACK -> read header ...), so one thread serves all connections without
// blocking. When the inbox is full the endpoint parks with its verified message and stops
// reading (back-pressure through the withheld ACK) until Receive makes room.
#ifndef SCD_COMMON_TRANSPORT_UCX_UCX_LISTENER_H_
#define SCD_COMMON_TRANSPORT_UCX_UCX_LISTENER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/transport/transport.h"
#include "common/transport/ucx/ucx_worker.h"

namespace scd::transport {

// Listens on "ucx://host:port" (port 0 = ephemeral; address() reports the bound port).
// UCX's socket listener binds without SO_REUSEPORT: a port another socket listens on is
// refused (UNAVAILABLE, naming the address), as the TCP transport refuses it.
absl::StatusOr<std::unique_ptr<Listener>> ListenUcx(std::shared_ptr<UcxWorker> worker,
                                                    const std::string& address,
                                                    const TransportOptions& options);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_UCX_UCX_LISTENER_H_
