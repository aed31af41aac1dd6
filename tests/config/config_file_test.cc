// Config files: format by extension, strict JSON (positions, duplicate keys, depth), loading
// from disk, the same config in JSON and YAML parsing to equal values, and a no-crash sweep over
// truncated, mutated and random inputs (tests/fuzz fuzzes the same parser).
#include "common/config/config_file.h"

#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "common/base/file_io.h"
#include "common/config/config_reader.h"
#include "common/config/daemon_config.h"
#include "common/config/effective_config.h"
#include "common/config/yaml_subset.h"
#include "tests/test_support.h"

namespace scd::config {
namespace {

using Catch::Matchers::Contains;
using nlohmann::json;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

constexpr char kYamlConfig[] = R"(# The same config as kJsonConfig.
role: decode
http:
  host: "0.0.0.0"
  port: 8080
  max_body_bytes: 1048576
  cors: [ "*" ]
models:
  - name: small
    path: /models/small
    dtype: bf16
    temperature: 0.7
    stop: ["</s>", '<|eot|>']
  - name: 'large "quoted"'
    path: /models/large
    tensor_parallel: 2
    enabled: false
scd:
  rank: -1
  threshold: 1e-3
  note: "caf\u00e9 \t tab"
  empty:
  labels: {}
  list_of_lists:
    - [1, 2]
    - []
)";

constexpr char kJsonConfig[] = R"({
  "role": "decode",
  "http": {"host": "0.0.0.0", "port": 8080, "max_body_bytes": 1048576, "cors": ["*"]},
  "models": [
    {"name": "small", "path": "/models/small", "dtype": "bf16", "temperature": 0.7,
     "stop": ["</s>", "<|eot|>"]},
    {"name": "large \"quoted\"", "path": "/models/large", "tensor_parallel": 2,
     "enabled": false}
  ],
  "scd": {"rank": -1, "threshold": 0.001, "note": "caf\u00e9 \t tab", "empty": null,
          "labels": {}, "list_of_lists": [[1, 2], []]}
})";

TEST_CASE("Config format follows the file extension", "[cpu]") {
  CHECK(*ConfigFormatFromPath("configs/decode.json") == ConfigFormat::kJson);
  CHECK(*ConfigFormatFromPath("configs/decode.yaml") == ConfigFormat::kYaml);
  CHECK(*ConfigFormatFromPath("configs/decode.yml") == ConfigFormat::kYaml);
  CHECK(*ConfigFormatFromPath("CONFIG.YAML") == ConfigFormat::kYaml);
  absl::StatusOr<ConfigFormat> toml = ConfigFormatFromPath("configs/decode.toml");
  REQUIRE_FALSE(toml.ok());
  CHECK(absl::IsInvalidArgument(toml.status()));
  CHECK_THAT(Message(toml.status()), Contains("configs/decode.toml"));
}

TEST_CASE("The same config in JSON and YAML parses to equal values", "[cpu]") {
  absl::StatusOr<json> from_yaml = ParseConfigText(kYamlConfig, ConfigFormat::kYaml, "c.yaml");
  absl::StatusOr<json> from_json = ParseConfigText(kJsonConfig, ConfigFormat::kJson, "c.json");
  REQUIRE(from_yaml.ok());
  REQUIRE(from_json.ok());
  CHECK(*from_yaml == *from_json);
  CHECK(from_yaml->dump() == from_json->dump());
  // Both give signed integers, so typed reads behave the same whichever format was used.
  CHECK_FALSE((*from_json)["http"]["port"].is_number_unsigned());
  CHECK_FALSE((*from_yaml)["http"]["port"].is_number_unsigned());

  // And the round trip: JSON rendered by nlohmann is valid flow YAML for this subset.
  absl::StatusOr<json> again =
      ParseConfigText("config: " + from_json->dump(), ConfigFormat::kYaml, "again.yaml");
  REQUIRE(again.ok());
  CHECK((*again)["config"] == *from_json);
}

TEST_CASE("JSON errors name the source and position", "[cpu]") {
  auto error = [](const std::string& text) {
    absl::StatusOr<json> parsed = ParseConfigText(text, ConfigFormat::kJson, "cfg.json");
    REQUIRE_FALSE(parsed.ok());
    CHECK(absl::IsInvalidArgument(parsed.status()));
    return Message(parsed.status());
  };
  CHECK_THAT(error("{\n  \"a\": 1,\n}"), Contains("cfg.json: parse error at line 3, column 1"));
  CHECK_THAT(error("{\"a\": tru}"), Contains("cfg.json: parse error at line 1"));
  CHECK_THAT(error(""), Contains("cfg.json: parse error"));
  CHECK_THAT(error("{} extra"), Contains("cfg.json: parse error"));
  CHECK(error("{\n\"a\": 1e999}") == "cfg.json:2: number overflow parsing '1e999'");
  CHECK(error("{\n  \"a\": 1,\n  \"b\": {\"c\": 1,\n   \"c\": 2}\n}") ==
        "cfg.json:4: duplicate key 'c'");
  CHECK(error("[1, 2]") == "cfg.json: the top level must be a JSON object");
  CHECK(error("\"text\"") == "cfg.json: the top level must be a JSON object");
  CHECK_THAT(error("{\"a\": \"\xFF\"}"), Contains("invalid"));

  auto nested = [](int levels) {
    std::string text;
    for (int i = 0; i < levels; ++i) text += "{\"k\": ";
    text += "1";
    for (int i = 0; i < levels; ++i) text += "}";
    return text;
  };
  CHECK(ParseConfigText(nested(64), ConfigFormat::kJson, "cfg.json").ok());
  CHECK_THAT(error(nested(65)), Contains("nesting deeper than 64 levels"));
  CHECK_THAT(error("{\"a\": " + std::string(1000000, '[')), Contains("nesting deeper"));
}

TEST_CASE("LoadConfigFile reads JSON and YAML files by extension", "[cpu]") {
  const std::string dir = testing::TempDir();
  REQUIRE(WriteFileAtomically(dir + "/decode.yaml", kYamlConfig).ok());
  REQUIRE(WriteFileAtomically(dir + "/decode.json", kJsonConfig).ok());
  REQUIRE(WriteFileAtomically(dir + "/bad.yml", "a: 1\nb: [\n").ok());
  REQUIRE(WriteFileAtomically(dir + "/decode.txt", "a: 1\n").ok());

  absl::StatusOr<json> yaml = LoadConfigFile(dir + "/decode.yaml");
  absl::StatusOr<json> from_json = LoadConfigFile(dir + "/decode.json");
  REQUIRE(yaml.ok());
  REQUIRE(from_json.ok());
  CHECK(*yaml == *from_json);

  absl::StatusOr<json> bad = LoadConfigFile(dir + "/bad.yml");
  REQUIRE_FALSE(bad.ok());
  CHECK(Message(bad.status()) == dir +
                                     "/bad.yml:2: unterminated flow sequence (a flow "
                                     "collection must end on the line it starts)");

  absl::StatusOr<json> missing = LoadConfigFile(dir + "/missing.yaml");
  REQUIRE_FALSE(missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
  CHECK_THAT(Message(missing.status()), Contains("missing.yaml"));

  absl::StatusOr<json> txt = LoadConfigFile(dir + "/decode.txt");
  REQUIRE_FALSE(txt.ok());
  CHECK(absl::IsInvalidArgument(txt.status()));
}

// Everything downstream of the parsers must cope with whatever they accepted.
void Exercise(const std::string& text, ConfigFormat format) {
  absl::StatusOr<json> parsed = ParseConfigText(text, format, "fuzz");
  if (!parsed.ok()) {
    CHECK(absl::IsInvalidArgument(parsed.status()));
    return;
  }
  CHECK(parsed->is_object());
  (void)RenderEffectiveConfig(*parsed);
  ConfigReader reader(*parsed);
  (void)reader.Int("port", 0, 0, 65535);
  (void)reader.String("role", "");
  for (ConfigReader& model : reader.ObjectList("models")) (void)model.Double("temperature", 1);
  (void)reader.Child("http").StringList("cors");
  (void)reader.Finish();
  json copy = *parsed;
  (void)ApplyOverride(&copy, "http.port", text.substr(0, 16));
}

TEST_CASE("Parsers survive truncated, mutated and random input", "[cpu]") {
  std::mt19937 rng(20240611);
  std::vector<std::pair<std::string, ConfigFormat>> seeds = {{kYamlConfig, ConfigFormat::kYaml},
                                                             {kJsonConfig, ConfigFormat::kJson}};
  // Every prefix of the valid configs (cut mid-token, mid-escape, mid-indentation).
  for (const auto& [text, format] : seeds) {
    for (size_t n = 0; n <= text.size(); ++n) Exercise(text.substr(0, n), format);
  }
  // Random single-byte mutations of the valid configs.
  for (int round = 0; round < 3000; ++round) {
    const auto& [seed, format] = seeds[round % 2];
    std::string text = seed;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text[at] = static_cast<char>(rng() % 256);
          break;
        case 1:
          text.erase(at, 1);
          break;
        default:
          text.insert(at, 1, static_cast<char>(rng() % 256));
          break;
      }
    }
    Exercise(text, format);
    Exercise(text, format == ConfigFormat::kJson ? ConfigFormat::kYaml : ConfigFormat::kJson);
  }
  // Random strings over the characters YAML gives meaning to.
  const std::string alphabet = " \n\n\t-:[]{}#,'\"\\&*!|>?%@`.~0123456789abceflnrstuxyz\r\xC3\xA9";
  for (int round = 0; round < 5000; ++round) {
    std::string text(rng() % 120, ' ');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    Exercise(text, ConfigFormat::kYaml);
    (void)ParseYamlInlineValue(text);
  }
  // Raw random bytes.
  for (int round = 0; round < 1000; ++round) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 256);
    Exercise(text, ConfigFormat::kYaml);
    Exercise(text, ConfigFormat::kJson);
  }
}

}  // namespace
}  // namespace scd::config
