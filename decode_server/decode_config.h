// The decode daemon's config file (JSON or YAML, configs/decode-*.yaml) read into
// DecodeDaemonConfig. Keys, defaults and ranges: docs/CONFIG.md. Missing keys take their
// defaults; invalid or unknown keys are errors naming the key. Relative paths are resolved
// against the config file's directory.
#ifndef SCD_DECODE_SERVER_DECODE_CONFIG_H_
#define SCD_DECODE_SERVER_DECODE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "decode_server/decode_daemon.h"
#include "nlohmann/json.hpp"

namespace scd {

absl::StatusOr<DecodeDaemonConfig> DecodeConfigFromJson(const nlohmann::json& config,
                                                        const std::string& config_path);

}  // namespace scd

#endif  // SCD_DECODE_SERVER_DECODE_CONFIG_H_
