// absl::Status <-> grpc::Status: same code numbers (google.rpc.Code), message kept.
#include "common/rpc/status_translation.h"

#include <string>

namespace scd::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  // Codes outside google.rpc.Code (a misbehaving peer) become UNKNOWN rather than garbage.
  const absl::StatusCode absl_code =
      (code > 0 && code <= static_cast<int>(absl::StatusCode::kUnauthenticated))
          ? static_cast<absl::StatusCode>(code)
          : absl::StatusCode::kUnknown;
  return absl::Status(absl_code, status.error_message());
}

}  // namespace scd::rpc
