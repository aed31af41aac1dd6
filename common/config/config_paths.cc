// See config_paths.h.
#include "common/config/config_paths.h"

namespace scd::config {

std::string ResolveConfigPath(const std::string& config_path, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const size_t slash = config_path.rfind('/');
  if (slash == std::string::npos) return path;
  return config_path.substr(0, slash + 1) + path;
}

}  // namespace scd::config
