// Loading a daemon's config file. Each daemon (prefill and decode) takes one config file under
// configs/, written in JSON (.json) or in the YAML subset of yaml_subset.h (.yaml, .yml), and
// gets it back as one nlohmann::json object whatever the format, so that the same config in
// either format loads to equal values (tests/config checks this).
//
// The start-up sequence the daemons share (see daemon_config.h and config_reader.h):
//   ParseDaemonCommandLine -> LoadDaemonConfig (LoadConfigFile + ApplyOverride per --key=value)
//   -> log RenderEffectiveConfig -> read it through a ConfigReader -> reader.Finish().
//
// Every error is InvalidArgument and names the source and line ("configs/decode.yaml:12: ...")
// except a missing file (NotFound naming the path). The loaders accept arbitrary bytes without
// crashing: nesting is capped at kMaxConfigDepth, and JSON duplicate keys are errors as in YAML.
#ifndef SCD_COMMON_CONFIG_CONFIG_FILE_H_
#define SCD_COMMON_CONFIG_CONFIG_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::config {

// The deepest nesting of mappings and lists a config may have (the top-level mapping counts as
// one level). Bounds the parsers' recursion and every later walk over the tree.
inline constexpr int kMaxConfigDepth = 64;

enum class ConfigFormat { kJson, kYaml };

// The format named by the path's extension: .json, or .yaml / .yml; InvalidArgument otherwise.
absl::StatusOr<ConfigFormat> ConfigFormatFromPath(std::string_view path);

// Parses a whole config text. The top level must be a mapping (an empty or comment-only YAML
// text is an empty mapping). JSON is strict RFC 8259 with duplicate keys rejected; positive
// integers come back as signed 64-bit integers so that JSON and YAML values compare equal.
// `source_name` (a path, or "" for none) prefixes error messages.
absl::StatusOr<nlohmann::json> ParseConfigText(std::string_view text, ConfigFormat format,
                                               std::string_view source_name);

// Reads and parses `path`, choosing the format by extension.
absl::StatusOr<nlohmann::json> LoadConfigFile(const std::string& path);

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_CONFIG_FILE_H_
