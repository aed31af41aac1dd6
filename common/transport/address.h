// Data-plane addresses: "<scheme>://host:port" with an IPv4 literal or a resolvable host name,
// e.g. "tcp://127.0.0.1:5555" or "ucx://decode-0:0" (port 0 = ephemeral when listening).
// Both transports bind and connect through the same parsing, so an address that one accepts
// the other accepts too (with its own scheme).
#ifndef SCD_COMMON_TRANSPORT_ADDRESS_H_
#define SCD_COMMON_TRANSPORT_ADDRESS_H_

#include <netinet/in.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace scd::transport {

// Parses `address`, requires `scheme`, and resolves the host to an IPv4 socket address.
// INVALID_ARGUMENT names the address and what is wrong with it; UNAVAILABLE when the host
// name does not resolve.
absl::StatusOr<sockaddr_in> ResolveAddress(const std::string& address, const std::string& scheme);

// "<scheme>://a.b.c.d:port".
std::string FormatAddress(const std::string& scheme, const sockaddr_in& address);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_ADDRESS_H_
