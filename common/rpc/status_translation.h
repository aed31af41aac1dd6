// absl::Status <-> grpc::Status at the gRPC edge. The project's one error scheme is
// absl::Status (docs/STYLE.md, "Errors"); services translate on the way out and clients on the way
// in, and nowhere else. Both enums number their codes identically (they follow
// google.rpc.Code), so the translation keeps code and message and drops nothing else.
#ifndef SCD_COMMON_RPC_STATUS_TRANSLATION_H_
#define SCD_COMMON_RPC_STATUS_TRANSLATION_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace scd::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_STATUS_TRANSLATION_H_
