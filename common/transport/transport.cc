// The transport factory and option validation. The only place that knows every
// implementation; callers pick one by name ("tcp" or "ucx") from their config.
#include "common/transport/transport.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/transport/bandwidth_limiter.h"
#include "common/transport/tcp/tcp_transport.h"
#include "common/transport/ucx/ucx_transport.h"

namespace scd::transport {

TransferToken NewTransferToken() {
  TransferToken token;
  size_t got = 0;
  while (got < token.size()) {
    const ssize_t n = getrandom(token.data() + got, token.size() - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (errno != EINTR) {
      std::abort();  // no kernel randomness: a guessable token must never be sent
    }
  }
  return token;
}

absl::Status ValidateOptions(const TransportOptions& options) {
  if (absl::Status st = CheckBandwidthGbps(options.bandwidth_gbps); !st.ok()) return st;
  if (options.max_message_bytes == 0) {
    return absl::InvalidArgumentError("max_message_bytes must be > 0");
  }
  if (options.max_inbox_messages == 0) {
    return absl::InvalidArgumentError("max_inbox_messages must be > 0");
  }
  if (options.stall_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("stall_timeout must be positive, got ",
                                                   absl::FormatDuration(options.stall_timeout)));
  }
  if (options.peer_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat("peer_timeout must be at least 1s, got ",
                                                   absl::FormatDuration(options.peer_timeout)));
  }
  if (options.socket_buffer_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket_buffer_bytes must be >= 0 (0 = kernel default), got ",
                     options.socket_buffer_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(const std::string& kind,
                                                           const TransportOptions& options) {
  if (kind == "tcp") return CreateTcpTransport(options);
  if (kind == "ucx") return CreateUcxTransport(options);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport \"", kind, "\" (expected \"tcp\" or \"ucx\")"));
}

}  // namespace scd::transport
