// ConfigReader: defaults for missing keys, errors that name the full key path (ranges, types,
// list elements, nested mappings), unknown keys with "did you mean" suggestions, and one error
// sink shared by a reader and its children.
#include "common/config/config_reader.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "common/config/yaml_subset.h"

namespace scd::config {
namespace {

using Catch::Matchers::Contains;
using nlohmann::json;

json Yaml(const std::string& text) {
  absl::StatusOr<json> parsed = ParseYaml(text, "test.yaml");
  REQUIRE(parsed.ok());
  return *parsed;
}

// The one error a reader over {"<key>": <value>} records for `read`.
template <typename Read>
std::string ErrorFor(const json& value, Read read) {
  const json config = {{"k", value}};
  ConfigReader reader(config);
  read(reader);
  const absl::Status status = reader.Finish();
  REQUIRE_FALSE(status.ok());
  CHECK(absl::IsInvalidArgument(status));
  return testing::StatusText(status);
}

TEST_CASE("ConfigReader returns values, and defaults for missing or null keys", "[cpu]") {
  const json config = Yaml(R"(
name: decode-0
port: 8080
ratio: 0.25
whole: 2
enabled: true
stops: ["</s>", "<eot>"]
mode: fast
timeout: 250ms
interval: 2
nothing:
http:
  host: 0.0.0.0
)");
  ConfigReader reader(config);
  CHECK(reader.String("name", "x") == "decode-0");
  CHECK(reader.Int("port", 0, 0, 65535) == 8080);
  CHECK(reader.Double("ratio", 1.0, 0, 1) == 0.25);
  CHECK(reader.Double("whole", 1.0) == 2.0);  // an integer is a valid number
  CHECK(reader.Bool("enabled", false));
  CHECK(reader.StringList("stops") == std::vector<std::string>{"</s>", "<eot>"});
  CHECK(reader.Enum("mode", "slow", {"slow", "fast"}) == "fast");
  CHECK(reader.DurationSeconds("timeout", 1) == Approx(0.25));
  CHECK(reader.DurationSeconds("interval", 1) == 2.0);
  ConfigReader http = reader.Child("http");
  CHECK(http.path() == "http");
  CHECK(http.String("host", "") == "0.0.0.0");
  CHECK(http.Int("port", 80) == 80);
  CHECK(reader.String("nothing", "default") == "default");

  CHECK(reader.String("missing_s", "dflt") == "dflt");
  CHECK(reader.Int("missing_i", 7, 0, 10) == 7);
  CHECK(reader.Double("missing_d", 0.5) == 0.5);
  CHECK_FALSE(reader.Bool("missing_b", false));
  CHECK(reader.StringList("missing_l", {"a"}) == std::vector<std::string>{"a"});
  CHECK(reader.Enum("missing_e", "slow", {"slow", "fast"}) == "slow");
  CHECK(reader.DurationSeconds("missing_t", 3) == 3);
  CHECK(reader.Child("missing_child").Int("x", 5) == 5);
  CHECK(reader.ObjectList("missing_list").empty());
  CHECK(reader.Finish().ok());
}

TEST_CASE("ConfigReader errors name the key, the expectation and the value", "[cpu]") {
  CHECK(ErrorFor("abc", [](ConfigReader& r) { r.Int("k", 0, 0, 65535); }) ==
        "config key 'k': expected an integer in [0, 65535], got \"abc\"");
  CHECK(ErrorFor(70000, [](ConfigReader& r) { r.Int("k", 0, 0, 65535); }) ==
        "config key 'k': expected an integer in [0, 65535], got 70000");
  CHECK(ErrorFor(-1, [](ConfigReader& r) { r.Int("k", 0, 0); }) ==
        "config key 'k': expected an integer >= 0, got -1");
  CHECK(ErrorFor(1.5, [](ConfigReader& r) { r.Int("k", 0); }) ==
        "config key 'k': expected an integer, got 1.5");
  CHECK(ErrorFor(std::numeric_limits<uint64_t>::max(), [](ConfigReader& r) { r.Int("k", 0); }) ==
        "config key 'k': expected an integer, got 18446744073709551615");
  CHECK(ErrorFor(2.5, [](ConfigReader& r) { r.Double("k", 0, 0, 1); }) ==
        "config key 'k': expected a number in [0, 1], got 2.5");
  CHECK(ErrorFor(std::nan(""), [](ConfigReader& r) { r.Double("k", 0); }) ==
        "config key 'k': expected a number, got .nan");
  CHECK(ErrorFor("yes", [](ConfigReader& r) { r.Bool("k", false); }) ==
        "config key 'k': expected true or false, got \"yes\"");
  CHECK(ErrorFor(8080, [](ConfigReader& r) { r.String("k", ""); }) ==
        "config key 'k': expected a string, got 8080");
  CHECK(ErrorFor(json{"a", 5, "b"}, [](ConfigReader& r) { r.StringList("k"); }) ==
        "config key 'k[1]': expected a string, got 5");
  CHECK(ErrorFor("a", [](ConfigReader& r) { r.StringList("k"); }) ==
        "config key 'k': expected a list of strings, got \"a\"");
  CHECK(ErrorFor("medium", [](ConfigReader& r) {
          r.Enum("k", "slow", {"slow", "fast"});
        }) == "config key 'k': expected one of \"slow\", \"fast\", got \"medium\"");
  CHECK_THAT(ErrorFor("soon", [](ConfigReader& r) { r.DurationSeconds("k", 1); }),
             Contains("config key 'k': expected a duration >= 0 seconds (a number of seconds, "
                      "or a string like \"250ms\""));
  CHECK_THAT(ErrorFor("-2s", [](ConfigReader& r) { r.DurationSeconds("k", 1); }),
             Contains("got \"-2s\""));
  CHECK(ErrorFor(json{{"a", 1}}, [](ConfigReader& r) { r.Int("k", 0); }) ==
        "config key 'k': expected an integer, got a mapping");
  CHECK(ErrorFor(3, [](ConfigReader& r) { r.Child("k"); }) ==
        "config key 'k': expected a mapping, got 3");
  CHECK(ErrorFor(3, [](ConfigReader& r) { r.ObjectList("k"); }) ==
        "config key 'k': expected a list of mappings, got 3");
  CHECK(ErrorFor(1, [](ConfigReader& r) {
          r.Int("k", 0);
          r.RequiredString("name");
        }) == "config key 'name': required, but missing");

  // The default comes back on an error, so a daemon can keep reading to collect every error.
  const json config = {{"port", "abc"}};
  ConfigReader reader(config);
  CHECK(reader.Int("port", 80, 0, 65535) == 80);
}

TEST_CASE("ConfigReader required values", "[cpu]") {
  const json config = {{"name", "n"}, {"port", 1}, {"ratio", 0.5}};
  ConfigReader reader(config);
  CHECK(reader.RequiredString("name") == "n");
  CHECK(reader.RequiredInt("port", 0, 10) == 1);
  CHECK(reader.RequiredDouble("ratio") == 0.5);
  CHECK(reader.Finish().ok());

  const json empty = json::object();
  ConfigReader missing(empty);
  missing.RequiredString("name");
  missing.RequiredInt("port");
  missing.Child("http").RequiredDouble("ratio");
  CHECK(testing::StatusText(missing.Finish()) ==
        "config key 'name': required, but missing; config key 'port': required, but missing; "
        "config key 'http.ratio': required, but missing");
}

TEST_CASE("ConfigReader reports unknown keys with suggestions", "[cpu]") {
  const json config = Yaml(R"(
http:
  prot: 8080
  host: h
max-tokens: 5
extra: 1
Timeout: 3
models:
  - name: a
    nmae: b
)");
  ConfigReader reader(config);
  ConfigReader http = reader.Child("http");
  http.Int("port", 80);
  http.String("host", "");
  reader.Int("max_tokens", 0);
  reader.Int("timeout", 0);
  for (ConfigReader& model : reader.ObjectList("models")) model.String("name", "");
  CHECK(testing::StatusText(reader.Finish()) ==
        "unknown config key 'Timeout' (did you mean 'timeout'?); "
        "unknown config key 'extra'; "
        "unknown config key 'max-tokens' (did you mean 'max_tokens'?); "
        "unknown config key 'http.prot' (did you mean 'http.port'?); "
        "unknown config key 'models[0].nmae' (did you mean 'models[0].name'?)");
}

TEST_CASE("ObjectList gives each element a path, and errors use it", "[cpu]") {
  const json config = Yaml(R"(
models:
  - name: small
    layers: 12
  - name: 3
    layers: -1
  - just a string
)");
  ConfigReader reader(config);
  std::vector<ConfigReader> models = reader.ObjectList("models");
  REQUIRE(models.size() == 3);
  CHECK(models[0].path() == "models[0]");
  CHECK(models[2].path() == "models[2]");
  std::vector<std::string> names;
  for (ConfigReader& model : models) {
    names.push_back(model.String("name", "?"));
    model.Int("layers", 1, 1, 1000);
  }
  CHECK(names == std::vector<std::string>{"small", "?", "?"});
  CHECK(testing::StatusText(reader.Finish()) ==
        "config key 'models[2]': expected a mapping, got \"just a string\"; "
        "config key 'models[1].name': expected a string, got 3; "
        "config key 'models[1].layers': expected an integer in [1, 1000], got -1");
}

TEST_CASE("ConfigReader: top level, Raw, Has, Keys and AddError", "[cpu]") {
  const json not_object = json::array();
  ConfigReader bad(not_object);
  CHECK(bad.Int("x", 4) == 4);
  CHECK(testing::StatusText(bad.Finish()) == "config: the top level must be a mapping, got a list");

  const json config =
      Yaml("labels: {a: 1, b: [2]}\nports: {http: 80, grpc: 9000}\nmin: 5\nmax: 2\n");
  ConfigReader reader(config);
  CHECK(reader.Has("min"));
  CHECK_FALSE(reader.Has("absent"));
  CHECK(reader.Raw("labels") == json{{"a", 1}, {"b", {2}}});  // marks the whole subtree read
  CHECK(reader.Raw("absent").is_null());
  ConfigReader ports = reader.Child("ports");
  CHECK(ports.Keys() == std::vector<std::string>{"grpc", "http"});
  for (const std::string& name : ports.Keys()) ports.Int(name, 0, 1, 65535);
  const int64_t min = reader.Int("min", 0);
  const int64_t max = reader.Int("max", 0);
  if (min > max) reader.AddError("min", "must not exceed 'max'");
  CHECK(testing::StatusText(reader.Finish()) == "config key 'min': must not exceed 'max'");
}

TEST_CASE("ConfigReader declares each key read: type, default, range, required", "[cpu]") {
  const json config = Yaml("http: {port: 80}\nname: ''\n");
  ConfigReader reader(config);
  ConfigReader http = reader.Child("http");
  http.Int("port", 8000, 0, 65535);
  http.Int("port", 1);  // a second read declares nothing
  reader.Double("fraction", 0.5, 0, 1);
  reader.DurationSeconds("wait", 30, 1);
  reader.Enum("mode", "a", std::vector<std::string_view>{"a", "b"});
  reader.String("name", "");
  reader.Require("name", "the model's name");
  const std::vector<ConfigKey>& keys = reader.keys();
  REQUIRE(keys.size() == 5);
  CHECK(keys[0].path == "http.port");
  CHECK(keys[0].type == "integer");
  CHECK(keys[0].default_value == 8000);
  CHECK(keys[0].range == "[0, 65535]");
  CHECK(keys[1].path == "fraction");
  CHECK(keys[1].range == "[0, 1]");
  CHECK(keys[2].type == "duration");
  CHECK(keys[2].range == ">= 1 seconds");
  CHECK(keys[3].range == "one of \"a\", \"b\"");
  CHECK(keys[4].path == "name");
  CHECK(keys[4].required);
  CHECK(keys[4].default_value.is_null());
  CHECK(testing::StatusText(reader.Finish()) ==
        "config key 'name': is required (the model's name)");
}

}  // namespace
}  // namespace scd::config
