// Address parsing and IPv4 resolution (see address.h).
#include "common/transport/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace scd::transport {

absl::StatusOr<sockaddr_in> ResolveAddress(const std::string& address, const std::string& scheme) {
  const std::string prefix = scheme + "://";
  if (address.compare(0, prefix.size(), prefix) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" must start with ", prefix));
  }
  const std::string rest = address.substr(prefix.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" must look like ", prefix, "host:port"));
  }
  const std::string host = rest.substr(0, colon);
  const std::string port_text = rest.substr(colon + 1);
  uint32_t port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\": bad port \"", port_text, "\""));
  }
  sockaddr_in out;
  std::memset(&out, 0, sizeof(out));
  out.sin_family = AF_INET;
  out.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &out.sin_addr) == 1) return out;

  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    // Name service failures are usually transient, so callers may retry.
    return absl::UnavailableError(absl::StrCat("address \"", address, "\": cannot resolve host: ",
                                               rc != 0 ? gai_strerror(rc) : "no IPv4 address"));
  }
  out.sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return out;
}

std::string FormatAddress(const std::string& scheme, const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof(text));
  return absl::StrCat(scheme, "://", text, ":", ntohs(address.sin_port));
}

}  // namespace scd::transport
