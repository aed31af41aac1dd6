// Fuzzes the daemon config path end to end (common/config/, prefill_server/prefill_config.h,
// decode_server/decode_config.h): config text -> ParseConfigText (YAML subset and JSON) ->
// command-line overrides (ParseDaemonCommandLine, ApplyOverride) -> RenderEffectiveConfig ->
// PrefillConfigFromJson and DecodeConfigFromJson (every key through a ConfigReader).
// Input: the config text, optionally followed by a NUL byte and command-line arguments, one
// per line (e.g. "--http.port=9000"), given after `--config fuzz.yaml`.
// The effective config the daemons log must itself be valid JSON that loads as a config.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config_file.h"
#include "common/config/daemon_config.h"
#include "common/config/effective_config.h"
#include "decode_server/decode_config.h"
#include "prefill_server/prefill_config.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

constexpr char kConfigPath[] = "configs/fuzz.yaml";

void Load(std::string_view text, scd::config::ConfigFormat format,
          const std::vector<std::string>& args) {
  auto parsed = scd::config::ParseConfigText(text, format, kConfigPath);
  if (!parsed.ok()) return;
  nlohmann::json config = std::move(parsed).value();
  if (!args.empty()) {
    std::vector<const char*> argv = {"scd-fuzz", "--config", kConfigPath};
    for (const std::string& a : args) argv.push_back(a.c_str());
    auto command_line =
        scd::config::ParseDaemonCommandLine(static_cast<int>(argv.size()), argv.data());
    if (command_line.ok()) {
      for (const scd::config::ConfigOverride& o : command_line->overrides) {
        (void)scd::config::ApplyOverride(&config, o.key, o.raw_value);
      }
    }
  }
  const std::string effective = scd::config::RenderEffectiveConfig(config);
  FUZZ_CHECK(scd::config::ParseConfigText(effective, scd::config::ConfigFormat::kJson, "").ok());
  (void)scd::config::RenderEffectiveConfig(config, 2);
  (void)scd::PrefillConfigFromJson(config, kConfigPath);
  (void)scd::DecodeConfigFromJson(config, kConfigPath);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view text = input;
  std::vector<std::string> args;
  if (const size_t nul = input.find('\0'); nul != std::string_view::npos) {
    text = input.substr(0, nul);
    std::string_view rest = input.substr(nul + 1);
    while (!rest.empty() && args.size() < 16) {
      const size_t eol = rest.find('\n');
      args.emplace_back(rest.substr(0, eol));  // c_str() ends each at any NUL, as argv would
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    }
  }
  Load(text, scd::config::ConfigFormat::kYaml, args);
  Load(text, scd::config::ConfigFormat::kJson, args);
  return 0;
}
