// ParseEtcdEndpoints: control_plane.etcd_endpoints into a list of URLs. Header-only, so that
// the daemons' config readers check the key without linking the etcd client.
#ifndef SCD_COMMON_RPC_ETCD_ENDPOINTS_H_
#define SCD_COMMON_RPC_ETCD_ENDPOINTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace scd::rpc {

// Splits "http://a:2379,http://b:2379" into endpoints. InvalidArgument naming the entry for
// an empty list, a scheme other than http/https, a missing port, or a mix of http and https.
inline absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view csv) {
  std::vector<std::string> out;
  bool https = false;
  for (absl::string_view raw : absl::StrSplit(csv, ',', absl::SkipWhitespace())) {
    absl::string_view e = absl::StripAsciiWhitespace(raw);
    absl::string_view rest = e;
    const bool is_https = absl::ConsumePrefix(&rest, "https://");
    if (!is_https && !absl::ConsumePrefix(&rest, "http://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", e, "' must start with http:// or https://"));
    }
    absl::ConsumeSuffix(&rest, "/");
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos || colon == 0 || colon + 1 == rest.size()) {
      return absl::InvalidArgumentError(absl::StrCat("etcd endpoint '", e, "' needs host:port"));
    }
    if (!out.empty() && is_https != https) {
      return absl::InvalidArgumentError("etcd endpoints mix http:// and https://");
    }
    https = is_https;
    out.push_back(absl::StrCat(is_https ? "https://" : "http://", rest));
  }
  if (out.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  return out;
}

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_ETCD_ENDPOINTS_H_
