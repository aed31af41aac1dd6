// The daemon command line (`--config FILE` plus `--key=value` overrides) and how overrides are
// applied: YAML typing of values, creation of intermediate mappings, '-' as '_' in keys, and
// errors that name the key.
#include "common/config/daemon_config.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "common/base/file_io.h"
#include "tests/test_support.h"

namespace scd::config {
namespace {

using Catch::Matchers::Contains;
using nlohmann::json;

absl::StatusOr<DaemonCommandLine> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "scd-decode");
  return ParseDaemonCommandLine(static_cast<int>(args.size()), args.data());
}

std::string ParseError(std::vector<const char*> args) {
  absl::StatusOr<DaemonCommandLine> parsed = Parse(std::move(args));
  REQUIRE_FALSE(parsed.ok());
  CHECK(absl::IsInvalidArgument(parsed.status()));
  return testing::StatusText(parsed.status());
}

TEST_CASE("Daemon command line: --config, overrides in order, --set, bare flags", "[cpu]") {
  absl::StatusOr<DaemonCommandLine> parsed =
      Parse({"--config", "configs/decode.yaml", "--http.port=8080", "--name", "decode 0", "--set",
             "scd.rank=4", "--max-tokens", "-5", "--set=a.b=c=d", "--debug", "--http.port=9090",
             "--verbose"});
  REQUIRE(parsed.ok());
  CHECK(parsed->program == "scd-decode");
  CHECK(parsed->config_path == "configs/decode.yaml");
  CHECK_FALSE(parsed->help_requested);
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const ConfigOverride& o : parsed->overrides) overrides.emplace_back(o.key, o.raw_value);
  CHECK(overrides == std::vector<std::pair<std::string, std::string>>{{"http.port", "8080"},
                                                                      {"name", "decode 0"},
                                                                      {"scd.rank", "4"},
                                                                      {"max_tokens", "-5"},
                                                                      {"a.b", "c=d"},
                                                                      {"debug", "true"},
                                                                      {"http.port", "9090"},
                                                                      {"verbose", "true"}});

  absl::StatusOr<DaemonCommandLine> eq = Parse({"--config=c.json", "--empty="});
  REQUIRE(eq.ok());
  CHECK(eq->config_path == "c.json");
  REQUIRE(eq->overrides.size() == 1);
  CHECK(eq->overrides[0].raw_value.empty());

  absl::StatusOr<DaemonCommandLine> help = Parse({"--help"});
  REQUIRE(help.ok());
  CHECK(help->help_requested);
  CHECK(Parse({"-h", "--config", "x.yaml"})->help_requested);
  CHECK_THAT(DaemonUsage("scd-decode"), Contains("usage: scd-decode --config FILE"));
}

TEST_CASE("Daemon command line: usage errors name the argument", "[cpu]") {
  CHECK(ParseError({}) == "command line: missing --config FILE");
  CHECK(ParseError({"--http.port=1"}) == "command line: missing --config FILE");
  CHECK_THAT(ParseError({"--config", "a.yaml", "extra"}), Contains("unexpected argument 'extra'"));
  CHECK_THAT(ParseError({"--config", "a.yaml", "-p", "1"}), Contains("unexpected argument '-p'"));
  CHECK_THAT(ParseError({"--config", "a.yaml", "--"}), Contains("unexpected argument '--'"));
  CHECK_THAT(ParseError({"--config"}), Contains("--config needs a file path"));
  CHECK_THAT(ParseError({"--config", "--x=1"}), Contains("--config needs a file path"));
  CHECK_THAT(ParseError({"--config=a.yaml", "--config=b.yaml"}), Contains("more than once"));
  CHECK_THAT(ParseError({"--config=a.yaml", "--set", "novalue"}),
             Contains("--set needs key=value, got 'novalue'"));
  CHECK_THAT(ParseError({"--config=a.yaml", "--set"}), Contains("--set needs key=value"));
  CHECK_THAT(ParseError({"--config=a.yaml", "--http..port=1"}),
             Contains("config key 'http..port' has an empty part"));
  CHECK_THAT(ParseError({"--config=a.yaml", "--http.port.=1"}), Contains("empty part"));
  CHECK_THAT(ParseError({"--config=a.yaml", "--models[0]=1"}),
             Contains("config key 'models[0]': keys are letters, digits"));
}

TEST_CASE("SplitConfigKey normalizes dashes and bounds the depth", "[cpu]") {
  CHECK(*SplitConfigKey("http.max-body-bytes") ==
        std::vector<std::string>{"http", "max_body_bytes"});
  CHECK(*SplitConfigKey("a") == std::vector<std::string>{"a"});
  CHECK_FALSE(SplitConfigKey("").ok());
  CHECK_FALSE(SplitConfigKey(".a").ok());
  CHECK_FALSE(SplitConfigKey("a b").ok());
  std::string deep = "k";
  for (int i = 1; i < 64; ++i) deep += ".k";
  CHECK(SplitConfigKey(deep).ok());
  CHECK_THAT(testing::StatusText(SplitConfigKey(deep + ".k").status()),
             Contains("more than 64 parts"));
}

TEST_CASE("ApplyOverride types values as YAML and creates intermediate mappings", "[cpu]") {
  json config = json::parse(R"({"http": {"port": 80, "host": "h"}, "models": ["x"]})");
  REQUIRE(ApplyOverride(&config, "http.port", "8080").ok());
  REQUIRE(ApplyOverride(&config, "name", "'8080'").ok());
  REQUIRE(ApplyOverride(&config, "models", "[a, b]").ok());
  REQUIRE(ApplyOverride(&config, "debug", "true").ok());
  REQUIRE(ApplyOverride(&config, "ratio", "0.5").ok());
  REQUIRE(ApplyOverride(&config, "prompt", "Note: be brief # really").ok());
  REQUIRE(ApplyOverride(&config, "scd.encoder.max-rank", "16").ok());
  REQUIRE(ApplyOverride(&config, "limits", "{a: 1, b: [2]}").ok());
  REQUIRE(ApplyOverride(&config, "api_key", "").ok());
  CHECK(config == json::parse(R"({
    "http": {"port": 8080, "host": "h"},
    "name": "8080",
    "models": ["a", "b"],
    "debug": true,
    "ratio": 0.5,
    "prompt": "Note: be brief # really",
    "scd": {"encoder": {"max_rank": 16}},
    "limits": {"a": 1, "b": [2]},
    "api_key": ""
  })"));
  CHECK(config["http"]["port"].is_number_integer());

  // A null intermediate becomes a mapping, and so does a null config.
  json with_null = json::parse(R"({"tls": null})");
  REQUIRE(ApplyOverride(&with_null, "tls.enabled", "yes").ok());
  CHECK(with_null == json::parse(R"({"tls": {"enabled": "yes"}})"));
  json empty;
  REQUIRE(ApplyOverride(&empty, "a.b", "1").ok());
  CHECK(empty == json::parse(R"({"a": {"b": 1}})"));
}

TEST_CASE("ApplyOverride errors name the key", "[cpu]") {
  json config = json::parse(R"({"http": {"port": 80, "hosts": ["a"]}})");
  const json before = config;
  CHECK(testing::StatusText(ApplyOverride(&config, "http.port.max", "1")) ==
        "config override 'http.port.max': 'http.port' is an integer, not a mapping");
  CHECK(testing::StatusText(ApplyOverride(&config, "http.hosts.first", "1")) ==
        "config override 'http.hosts.first': 'http.hosts' is a list, not a mapping");
  CHECK_THAT(testing::StatusText(ApplyOverride(&config, "http.max-port", "[1, 2")),
             Contains("config override 'http.max_port': unterminated flow sequence"));
  CHECK_THAT(testing::StatusText(ApplyOverride(&config, "x", "'abc")),
             Contains("config override 'x': unterminated single-quoted string"));
  CHECK_THAT(testing::StatusText(ApplyOverride(&config, "x..y", "1")), Contains("empty part"));
  CHECK(config == before);  // failed overrides change nothing

  json list = json::array();
  CHECK_THAT(testing::StatusText(ApplyOverride(&list, "a", "1")),
             Contains("the config is not a mapping"));

  // Depth: the key's levels count toward the limit together with the value's.
  std::string deep = "k";
  for (int i = 1; i < 63; ++i) deep += ".k";
  json deep_config = json::object();
  CHECK(ApplyOverride(&deep_config, deep, "[1]").ok());
  CHECK_THAT(testing::StatusText(ApplyOverride(&deep_config, deep, "[[1]]")),
             Contains("nesting deeper"));
}

TEST_CASE("LoadDaemonConfig applies overrides over the file", "[cpu]") {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/prefill.yaml";
  REQUIRE(WriteFileAtomically(path, "http:\n  port: 80\nmodels: [a]\n").ok());
  const std::string config_flag = "--config=" + path;
  absl::StatusOr<DaemonCommandLine> command_line =
      Parse({config_flag.c_str(), "--http.port", "8081", "--models=[b, c]", "--http.port=8082"});
  REQUIRE(command_line.ok());
  absl::StatusOr<json> config = LoadDaemonConfig(*command_line);
  REQUIRE(config.ok());
  CHECK(*config == json::parse(R"({"http": {"port": 8082}, "models": ["b", "c"]})"));

  absl::StatusOr<DaemonCommandLine> bad = Parse({config_flag.c_str(), "--http.port.x=1"});
  REQUIRE(bad.ok());
  CHECK_THAT(testing::StatusText(LoadDaemonConfig(*bad).status()),
             Contains("'http.port' is an integer"));

  absl::StatusOr<DaemonCommandLine> missing = Parse({"--config", "/nonexistent/x.yaml"});
  REQUIRE(missing.ok());
  CHECK(absl::IsNotFound(LoadDaemonConfig(*missing).status()));
}

}  // namespace
}  // namespace scd::config
