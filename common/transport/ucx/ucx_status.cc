// ucs_status_t -> absl::Status (see ucx_status.h).
#include "common/transport/ucx/ucx_status.h"

#include "absl/strings/str_cat.h"

namespace scd::transport {

absl::Status UcxStatus(ucs_status_t status, const std::string& what) {
  if (status == UCS_OK) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", ucs_status_string(status), " (UCX)");
  switch (status) {
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_TIMED_OUT:
      return absl::DeadlineExceededError(message);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_OUT_OF_RANGE:
      return absl::ResourceExhaustedError(message);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::InvalidArgumentError(message);
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NOT_IMPLEMENTED:
      return absl::UnimplementedError(message);
    case UCS_ERR_ALREADY_EXISTS:
      return absl::AlreadyExistsError(message);
    case UCS_ERR_BUSY:  // e.g. the listening port is taken
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_ELEM:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SHMEM_SEGMENT:
      return absl::UnavailableError(message);
    default:
      // Link and endpoint failures (keepalive timeouts included) mean the peer is gone.
      if (UCS_IS_LINK_ERROR(status) || UCS_IS_ENDPOINT_ERROR(status)) {
        return absl::UnavailableError(message);
      }
      return absl::InternalError(message);
  }
}

}  // namespace scd::transport
