// The one place where UCX status codes (ucs_status_t) become absl::Status (docs/STYLE.md,
// "Errors": translate at the edges only, one file per foreign scheme).
#ifndef SCD_COMMON_TRANSPORT_UCX_UCX_STATUS_H_
#define SCD_COMMON_TRANSPORT_UCX_UCX_STATUS_H_

#include <ucs/type/status.h>

#include <string>

#include "absl/status/status.h"

namespace scd::transport {

// OK for UCS_OK; otherwise the matching code with "<what>: <UCX's text>". A lost or
// unreachable peer is UNAVAILABLE, a cancelled request CANCELLED, a timeout
// DEADLINE_EXCEEDED.
absl::Status UcxStatus(ucs_status_t status, const std::string& what);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_UCX_UCX_STATUS_H_
