// The HTTP connection keys both daemons' configs take under `http` (docs/CONFIG.md), read into
// HttpServerOptions: their defaults are that struct's, their ranges are here. Header-only, so
// that scd_config needs no HTTP library.
#ifndef SCD_COMMON_CONFIG_HTTP_KEYS_H_
#define SCD_COMMON_CONFIG_HTTP_KEYS_H_

#include <cmath>

#include "common/config/config_reader.h"
#include "common/config/option_keys.h"
#include "common/http/http_server.h"

namespace scd::config {

namespace internal {
// A whole-seconds duration key in [min, max] seconds.
inline void ReadWholeSeconds(ConfigReader& r, std::string_view key, int* seconds, int min,
                             int max) {
  *seconds = static_cast<int>(std::ceil(r.DurationSeconds(key, *seconds, min, max)));
}
}  // namespace internal

// header_timeout, body_timeout, write_timeout and max_connections_per_client from `http`; a
// bad value is recorded as the reader's error.
inline void ReadHttpConnectionKeys(ConfigReader& http, http::HttpServerOptions* o) {
  internal::ReadWholeSeconds(http, "header_timeout", &o->header_timeout_seconds, 1, 3600);
  internal::ReadWholeSeconds(http, "body_timeout", &o->read_timeout_seconds, 1, 3600);
  internal::ReadWholeSeconds(http, "write_timeout", &o->write_timeout_seconds, 1, 3600);
  ReadInt(http, "max_connections_per_client", &o->max_connections_per_client, 1, 1 << 20);
}

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_HTTP_KEYS_H_
