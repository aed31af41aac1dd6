// Daemon command line and overrides (see daemon_config.h). Arguments are parsed by hand, as in
// common/tools/cli/flags.h, because override names are config paths, not a fixed set of flags.
#include "common/config/daemon_config.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/config/config_file.h"
#include "common/config/string_view_bridge.h"
#include "common/config/value_text.h"
#include "common/config/yaml_scalar.h"
#include "common/config/yaml_subset.h"

namespace scd::config {
namespace {

using nlohmann::json;

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

absl::Status UsageError(std::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("command line: ", Sv(message)));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitConfigKey(std::string_view dotted_key) {
  const std::string shown = Excerpt(dotted_key);
  if (dotted_key.empty()) return absl::InvalidArgumentError("empty config key");
  std::vector<std::string> segments(1);
  for (const char c : dotted_key) {
    if (c == '.') {
      if (segments.back().empty()) break;  // reported below
      if (segments.size() >= static_cast<size_t>(kMaxConfigDepth)) {
        return absl::InvalidArgumentError(
            absl::StrCat("config key '", shown, "' has more than ", kMaxConfigDepth, " parts"));
      }
      segments.emplace_back();
      continue;
    }
    if (!IsKeyChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config key '", shown, "': keys are letters, digits, '_' and '-', joined by '.'"));
    }
    segments.back().push_back(c == '-' ? '_' : c);
  }
  for (const std::string& segment : segments) {
    if (segment.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("config key '", shown, "' has an empty part"));
    }
  }
  return segments;
}

absl::Status ApplyOverride(json* config, std::string_view dotted_key, std::string_view raw_value) {
  SCD_ASSIGN_OR_RETURN(const std::vector<std::string> path, SplitConfigKey(dotted_key));
  const std::string key = absl::StrJoin(path, ".");
  // The value's containers sit below the root and the path's intermediate mappings.
  absl::StatusOr<json> value = ParseYamlInlineValue(raw_value, static_cast<int>(path.size()) + 1);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config override '", key, "': ", value.status().message()));
  }
  if (config->is_null()) *config = json::object();
  if (!config->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config override '", key, "': the config is not a mapping"));
  }
  json* node = config;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    json& child = (*node)[path[i]];
    if (child.is_null()) child = json::object();
    if (!child.is_object()) {
      const std::string prefix = absl::StrJoin(path.begin(), path.begin() + i + 1, ".");
      return absl::InvalidArgumentError(absl::StrCat("config override '", key, "': '", prefix,
                                                     "' is ", Sv(ConfigTypeName(child)),
                                                     ", not a mapping"));
    }
    node = &child;
  }
  (*node)[path.back()] = std::move(value).value();
  return absl::OkStatus();
}

absl::StatusOr<DaemonCommandLine> ParseDaemonCommandLine(int argc, const char* const* argv) {
  DaemonCommandLine out;
  out.program = argc > 0 && argv[0] != nullptr ? argv[0] : "daemon";
  auto arg_at = [&](int i) -> std::string_view { return argv[i] != nullptr ? argv[i] : ""; };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = arg_at(i);
    if (arg == "--help" || arg == "-h") {
      out.help_requested = true;
      continue;
    }
    if (arg.size() <= 2 || !absl::StartsWith(Sv(arg), "--")) {
      return UsageError(absl::StrCat("unexpected argument '", Excerpt(arg),
                                     "' (overrides are written --key=value)"));
    }
    std::string_view name = arg.substr(2);
    std::string_view value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string_view::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    // `--name VALUE`: the next argument is the value unless it is another `--` argument.
    auto take_next = [&]() {
      if (has_value || i + 1 >= argc || absl::StartsWith(Sv(arg_at(i + 1)), "--")) return false;
      value = arg_at(++i);
      has_value = true;
      return true;
    };
    if (name == "config") {
      take_next();
      if (!has_value || value.empty()) return UsageError("--config needs a file path");
      if (!out.config_path.empty()) return UsageError("--config given more than once");
      out.config_path = std::string(value);
      continue;
    }
    if (name == "set") {
      take_next();
      const size_t eq = value.find('=');
      if (!has_value || eq == std::string_view::npos) {
        return UsageError(absl::StrCat("--set needs key=value, got '", Excerpt(value), "'"));
      }
      name = value.substr(0, eq);
      value = value.substr(eq + 1);
    } else if (!take_next() && !has_value) {
      value = "true";
    }
    absl::StatusOr<std::vector<std::string>> path = SplitConfigKey(name);
    if (!path.ok()) return UsageError(Sv(path.status().message()));
    out.overrides.push_back(ConfigOverride{absl::StrJoin(*path, "."), std::string(value)});
  }
  if (!out.help_requested && out.config_path.empty()) {
    return UsageError("missing --config FILE");
  }
  return out;
}

std::string DaemonUsage(std::string_view program) {
  constexpr char kOptions[] =
      R"(  --config FILE    the config file (.json, .yaml or .yml), e.g. one under configs/
  --KEY=VALUE      overrides one config key: KEY is a dotted path (http.port; '-' and
                   '_' are the same), VALUE is YAML (8080 is an integer, [a, b] a list,
                   '8080' a string); later overrides win
  --KEY            alone sets KEY to true
  --help, -h       prints this text
)";
  return absl::StrCat("usage: ", Sv(program),
                      " --config FILE [--KEY=VALUE | --KEY VALUE | --set KEY=VALUE]...\n",
                      kOptions);
}

absl::StatusOr<json> LoadDaemonConfig(const DaemonCommandLine& command_line) {
  SCD_ASSIGN_OR_RETURN(json config, LoadConfigFile(command_line.config_path));
  for (const ConfigOverride& o : command_line.overrides) {
    SCD_RETURN_IF_ERROR(ApplyOverride(&config, o.key, o.raw_value));
  }
  return config;
}

}  // namespace scd::config
