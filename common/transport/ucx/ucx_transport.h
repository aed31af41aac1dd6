// The UCX transport: the data plane over UCP streams, addresses "ucx://host:port". The
// receiver opens a UCP listener on a socket address (ucp_listener_create) and the sender
// connects to it in client-server mode, so peers exchange UCX worker addresses without any
// side channel. UCX picks the wire (TCP and shared memory on plain hosts, RDMA where the
// cluster's UCX has it; UCX_TLS or TransportOptions::ucx_transports restricts the choice).
// Each Transport owns one UCP worker with its own progress thread (ucx_worker.h).
//
// Frames, acknowledgements and loss reports are the same as TCP's (frame.h, frame_sender.h);
// a dead peer surfaces through UCX's endpoint error handler (UCP_ERR_HANDLING_MODE_PEER).
// The stream API has no rendezvous (zero-copy) protocol; UCP active messages are the upgrade
// path if RDMA zero-copy matters.
#ifndef SCD_COMMON_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define SCD_COMMON_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/transport/transport.h"

namespace scd::transport {

// UNAVAILABLE, with UCX's reason, when UCX cannot start on this host.
absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(const TransportOptions& options);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_UCX_UCX_TRANSPORT_H_
