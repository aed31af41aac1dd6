// The TCP transport: the portable fallback data plane over POSIX sockets, addresses
// "tcp://host:port". One reader thread per connection on each side; the sender writes frames
// on its own thread, one frame at a time per connection, and its reader thread collects the
// receiver's ACKs, so several messages can be in flight on one connection.
#ifndef SCD_COMMON_TRANSPORT_TCP_TCP_TRANSPORT_H_
#define SCD_COMMON_TRANSPORT_TCP_TCP_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/transport/transport.h"

namespace scd::transport {

absl::StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(const TransportOptions& options);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_TCP_TCP_TRANSPORT_H_
