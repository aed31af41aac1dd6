// The prefill daemon's config file (JSON or YAML, configs/prefill*.yaml) read into
// PrefillDaemonConfig. Every key, its default and its range is listed in
// docs/CONFIG.md; a missing key takes its default, an invalid or unknown one is an error
// naming the key (common/config/config_reader.h). Relative paths are resolved against the
// config file's directory, so a config under configs/ works from any working directory.
#ifndef SCD_PREFILL_SERVER_PREFILL_CONFIG_H_
#define SCD_PREFILL_SERVER_PREFILL_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/config_reader.h"
#include "nlohmann/json.hpp"
#include "prefill_server/prefill_daemon.h"

namespace scd {

absl::StatusOr<PrefillDaemonConfig> PrefillConfigFromJson(const nlohmann::json& config,
                                                          const std::string& config_path);

// Every key the reader knows, with its default and range: what a read of a config with one
// empty specialist declares (config::ConfigKey; specialists[0].* stands for specialists[].*).
// docs/CONFIG.md's scd-prefill table is checked against it.
std::vector<config::ConfigKey> PrefillConfigKeys();

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_PREFILL_CONFIG_H_
