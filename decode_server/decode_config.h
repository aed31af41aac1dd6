// The decode daemon's config file (JSON or YAML, configs/decode-*.yaml) read into
// DecodeDaemonConfig. Keys, defaults and ranges: docs/CONFIG.md. Missing keys take their
// defaults (the initial values of the option structs DecodeDaemonConfig embeds); invalid or
// unknown keys are errors naming the key. Relative paths are resolved against the config
// file's directory.
#ifndef SCD_DECODE_SERVER_DECODE_CONFIG_H_
#define SCD_DECODE_SERVER_DECODE_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/config_reader.h"
#include "decode_server/decode_daemon.h"
#include "nlohmann/json.hpp"

namespace scd {

absl::StatusOr<DecodeDaemonConfig> DecodeConfigFromJson(const nlohmann::json& config,
                                                        const std::string& config_path);

// Every key the reader knows, with its default and range: what a read of an empty config
// declares (config::ConfigKey). docs/CONFIG.md's scd-decode table is checked against it.
std::vector<config::ConfigKey> DecodeConfigKeys();

// A setting that runs below the quality measured for the recommended one: the key, and what
// the measurement says it costs. The daemon logs each at start-up (config_below_measured_quality,
// level warn).
struct ConfigWarning {
  std::string key;
  std::string consequence;
};
std::vector<ConfigWarning> QualityWarnings(const DecodeDaemonConfig& config);

}  // namespace scd

#endif  // SCD_DECODE_SERVER_DECODE_CONFIG_H_
