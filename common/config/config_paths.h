// Paths inside config files. A relative path is read relative to the directory of the config
// file that names it (as nginx and systemd drop-ins do), not the daemon's working directory,
// so `configs/prefill.yaml` can say `../../shared/models/stories260K` and work from anywhere.
#ifndef SCD_COMMON_CONFIG_CONFIG_PATHS_H_
#define SCD_COMMON_CONFIG_CONFIG_PATHS_H_

#include <string>

namespace scd::config {

// `path` unchanged when empty or absolute; otherwise joined to dirname(config_path).
std::string ResolveConfigPath(const std::string& config_path, const std::string& path);

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_CONFIG_PATHS_H_
