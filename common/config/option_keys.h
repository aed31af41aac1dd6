// Reads of config keys straight into a component's option struct: the member's initial value
// is the key's default, so a default is written once, in the struct (DecodeEngineOptions,
// TransportOptions, ...), and the range once, at the read. The daemons' config readers
// (decode_config.cc, prefill_config.cc) are built from these. Header-only, like
// cuda_kernel_keys.h, so that scd_config links no component library.
#ifndef SCD_COMMON_CONFIG_OPTION_KEYS_H_
#define SCD_COMMON_CONFIG_OPTION_KEYS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/config/config_paths.h"
#include "common/config/config_reader.h"

namespace scd::config {

// An integer key into *value (int, int64_t or size_t), in [min, max].
template <typename T>
void ReadInt(ConfigReader& r, std::string_view key, T* value, int64_t min, int64_t max) {
  *value = static_cast<T>(r.Int(key, static_cast<int64_t>(*value), min, max));
}

inline void ReadDouble(ConfigReader& r, std::string_view key, double* value, double min,
                       double max) {
  *value = r.Double(key, *value, min, max);
}

inline void ReadBool(ConfigReader& r, std::string_view key, bool* value) {
  *value = r.Bool(key, *value);
}

inline void ReadString(ConfigReader& r, std::string_view key, std::string* value) {
  *value = r.String(key, *value);
}

// A duration key (seconds, or "250ms", "2m", ...) in [min_seconds, max_seconds].
inline void ReadDuration(ConfigReader& r, std::string_view key, absl::Duration* value,
                         double min_seconds, double max_seconds) {
  *value = absl::Seconds(
      r.DurationSeconds(key, absl::ToDoubleSeconds(*value), min_seconds, max_seconds));
}

// An enum key: one of the names in `names`, parsed once here into the component's own enum.
template <typename E>
void ReadEnum(ConfigReader& r, std::string_view key, E* value,
              absl::Span<const std::pair<std::string_view, E>> names) {
  std::string_view default_name;
  std::vector<std::string_view> allowed;
  for (const auto& [name, e] : names) {
    allowed.push_back(name);
    if (e == *value) default_name = name;
  }
  const std::string chosen = r.Enum(key, default_name, allowed);
  for (const auto& [name, e] : names) {
    if (name == chosen) *value = e;
  }
}

// A path key (default empty), resolved against the config file's directory (config_paths.h).
class PathKeys {
 public:
  explicit PathKeys(std::string config_path) : config_path_(std::move(config_path)) {}
  std::string operator()(ConfigReader& r, std::string_view key) const {
    return ResolveConfigPath(config_path_, r.String(key, ""));
  }

 private:
  std::string config_path_;
};

// The cert, key and ca path keys of a `tls` mapping, into any struct with cert, key and
// ca_cert members (rpc::TlsPaths).
template <typename TlsPaths>
void ReadTlsPaths(ConfigReader& tls, const PathKeys& path, TlsPaths* paths) {
  paths->cert = path(tls, "cert");
  paths->key = path(tls, "key");
  paths->ca_cert = path(tls, "ca");
}

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_OPTION_KEYS_H_
