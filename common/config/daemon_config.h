// A daemon's command line and the config it yields. Both daemons are started as
//   prog --config FILE [--some.key=VALUE | --some.key VALUE | --set some.key=VALUE]... [--help]
// so that any config key can be overridden at launch without editing the file under configs/.
// A key is a dotted path into the config's mappings (`http.port`); '-' and '_' are the same
// inside keys (`--max-tokens` sets `max_tokens`). VALUE is read as a YAML value (see
// ParseYamlInlineValue): `--http.port=8080` is an integer, `--models=[a,b]` a list and
// `--name='8080'` a string. A bare `--key` (last, or followed by another `--` argument) sets
// true. Overrides apply in command-line order, so a later one wins.
//
// Typical start-up:
//   auto command_line = config::ParseDaemonCommandLine(argc, argv);  // usage error -> exit 2
//   if (command_line->help_requested) { print config::DaemonUsage(argv[0]); exit 0; }
//   auto config = config::LoadDaemonConfig(*command_line);
//   log "effective config: " + config::RenderEffectiveConfig(*config);
//   config::ConfigReader reader(*config);  ... reader.Int("http.port" ...) ...
//   absl::Status status = reader.Finish();  // every invalid value and unknown key, named
#ifndef SCD_COMMON_CONFIG_DAEMON_CONFIG_H_
#define SCD_COMMON_CONFIG_DAEMON_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::config {

struct ConfigOverride {
  std::string key;        // normalized dotted path: '-' already replaced by '_'
  std::string raw_value;  // as typed; parsed by ApplyOverride
};

struct DaemonCommandLine {
  std::string program;                    // argv[0]
  std::string config_path;                // --config; always set unless help_requested
  std::vector<ConfigOverride> overrides;  // in command-line order
  bool help_requested = false;            // --help or -h
};

// Parses argv[1..argc). InvalidArgument naming the argument for: a positional or single-dash
// argument, --config missing (unless --help), given twice or without a path, `--set` without
// key=value, and keys that are not dotted paths of [A-Za-z0-9_-] segments.
absl::StatusOr<DaemonCommandLine> ParseDaemonCommandLine(int argc, const char* const* argv);

// The usage text for --help and usage errors.
std::string DaemonUsage(std::string_view program);

// Splits a dotted key into its segments with '-' normalized to '_'. InvalidArgument for an
// empty key or segment, a character outside [A-Za-z0-9_-], or more than kMaxConfigDepth
// segments.
absl::StatusOr<std::vector<std::string>> SplitConfigKey(std::string_view dotted_key);

// Sets `dotted_key` in `*config` (an object, or null which becomes one) to `raw_value` parsed
// as a YAML value, creating missing or null intermediate mappings and replacing whatever the
// key held. InvalidArgument naming the key when the value does not parse or when the path runs
// through a value that is not a mapping ("'http.port' is an integer, not a mapping").
absl::Status ApplyOverride(nlohmann::json* config, std::string_view dotted_key,
                           std::string_view raw_value);

// LoadConfigFile(command_line.config_path), then ApplyOverride for each override in order.
absl::StatusOr<nlohmann::json> LoadDaemonConfig(const DaemonCommandLine& command_line);

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_DAEMON_CONFIG_H_
