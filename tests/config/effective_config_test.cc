// The effective config as logged at start-up: which keys count as secrets, and that their
// values are redacted wherever they sit while everything else is shown unchanged.
#include "common/config/effective_config.h"

#include <limits>
#include <string>

#include "catch2/catch.hpp"

namespace scd::config {
namespace {

using nlohmann::json;

TEST_CASE("IsSecretConfigKey", "[cpu]") {
  for (const char* key : {"token", "hf_token", "auth-token", "accessToken", "api_key", "apiKey",
                          "APIKey", "key", "private_key", "api_keys", "password", "db.password",
                          "passwd", "client_secret", "secrets", "credentials"}) {
    INFO(key);
    CHECK(IsSecretConfigKey(key));
  }
  for (const char* key : {"max_tokens", "tokenizer", "tokenizer_path", "token_file", "tls.key_path",
                          "api_key_file", "secret_name", "eos_token", "bos_token", "pad_token",
                          "name", "port", "keyword", "monkey", "cache_keys_per_block_count", ""}) {
    INFO(key);
    CHECK_FALSE(IsSecretConfigKey(key));
  }
}

TEST_CASE("RenderEffectiveConfig redacts secrets and keeps everything else", "[cpu]") {
  const json config = json::parse(R"({
    "http": {"port": 8080, "api_key": "sk-live-123", "token_file": "/etc/token"},
    "hf_token": "",
    "max_tokens": 4096,
    "tokenizer": "/models/tok.json",
    "eos_token": "</s>",
    "password": 1234,
    "secrets": {"hf": "abc", "list": ["x", ""], "n": 3},
    "api_keys": ["k1", "k2"],
    "models": [{"name": "a", "token": "t"}]
  })");
  const json rendered = json::parse(RenderEffectiveConfig(config));
  CHECK(rendered == json::parse(R"({
    "http": {"port": 8080, "api_key": "<redacted>", "token_file": "/etc/token"},
    "hf_token": "",
    "max_tokens": 4096,
    "tokenizer": "/models/tok.json",
    "eos_token": "</s>",
    "password": 1234,
    "secrets": {"hf": "<redacted>", "list": ["<redacted>", ""], "n": 3},
    "api_keys": ["<redacted>", "<redacted>"],
    "models": [{"name": "a", "token": "<redacted>"}]
  })"));
  CHECK(RenderEffectiveConfig(config).find("sk-live") == std::string::npos);
  CHECK(RenderEffectiveConfig(config).find('\n') == std::string::npos);  // one log line

  const json small = {{"a", 1}, {"b", {{"c", "d"}}}};
  CHECK(RenderEffectiveConfig(small) == R"({"a":1,"b":{"c":"d"}})");
  CHECK(RenderEffectiveConfig(small, 2) == "{\n  \"a\": 1,\n  \"b\": {\n    \"c\": \"d\"\n  }\n}");
}

TEST_CASE("RenderEffectiveConfig never throws on odd values", "[cpu]") {
  const json config = {{"bad_utf8", "\xFF\xFE"},
                       {"inf", std::numeric_limits<double>::infinity()},
                       {"password", "\xC3"}};
  const std::string rendered = RenderEffectiveConfig(config);
  CHECK(rendered ==
        "{\"bad_utf8\":\"\xEF\xBF\xBD\xEF\xBF\xBD\",\"inf\":null,"
        "\"password\":\"<redacted>\"}");
  json deep = 1;
  for (int i = 0; i < 2000; ++i) deep = json::array({std::move(deep)});
  json holder = {{"secret", "s"}};
  holder["deep"] = std::move(deep);  // deeper than any loader allows; the walk is iterative
  CHECK(RenderEffectiveConfig(holder).find("<redacted>") != std::string::npos);
}

}  // namespace
}  // namespace scd::config
