// See cluster_token.h.
#include "common/rpc/cluster_token.h"

#include "absl/strings/str_cat.h"
#include "common/base/constant_time.h"

namespace scd::rpc {

absl::Status CheckClusterToken(const std::string& token, bool dev_insecure) {
  if (dev_insecure) return absl::OkStatus();
  std::string problem;
  if (token.empty()) {
    problem = "is empty";
  } else if (token == kExampleClusterToken) {
    problem = "is the example token of configs/*.yaml";
  } else if (token.size() < kMinClusterTokenBytes) {
    problem = absl::StrCat("is ", token.size(), " characters long, below the ",
                           kMinClusterTokenBytes, " of a usable secret");
  } else {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "control_plane.cluster_token ", problem,
      ": set a secret shared by the cluster's daemons (e.g. `openssl rand -hex 32`, passed as "
      "--control_plane.cluster_token=...), or control_plane.dev_insecure: true for a "
      "development cluster on a trusted network"));
}

bool ClusterTokenMatches(const std::string& expected, const std::string& presented) {
  return expected.empty() || ConstantTimeEquals(presented, expected);
}

}  // namespace scd::rpc
