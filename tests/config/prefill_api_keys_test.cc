// The prefill daemon's API keys: http.api_keys[] as the config reader takes it (a YAML list of
// mappings, key or key_file, the legacy http.api_key beside it, and the mistakes it refuses),
// and what the limits mean (prefill_server/api_keys.h, token_bucket.h), driven by a fake
// clock: the bucket's refill and Retry-After, the concurrency slots given back by leases
// however they end, per-key isolation, refused requests taking nothing, and the metrics.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "common/base/file_io.h"
#include "common/config/yaml_subset.h"
#include "common/http/openai_error.h"
#include "common/metrics/registry.h"
#include "prefill_server/admission.h"
#include "prefill_server/api_keys.h"
#include "prefill_server/prefill_config.h"
#include "prefill_server/token_bucket.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using Catch::Matchers::Contains;
using nlohmann::json;
using Time = std::chrono::steady_clock::time_point;

std::chrono::steady_clock::duration Seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// A prefill config whose `http` part is the YAML `http_yaml` (indented under `http:`).
absl::StatusOr<PrefillDaemonConfig> ReadWithHttp(const std::string& http_yaml,
                                                 const std::string& config_path = "") {
  const std::string text =
      "base_model: /m\nspecialists:\n  - name: s\n    mode: oracle\nhttp:\n" + http_yaml;
  absl::StatusOr<json> parsed = config::ParseYaml(text, "prefill.yaml");
  REQUIRE(parsed.ok());
  return PrefillConfigFromJson(*parsed, config_path);
}

std::string ErrorOf(const std::string& http_yaml) {
  absl::StatusOr<PrefillDaemonConfig> c = ReadWithHttp(http_yaml);
  REQUIRE_FALSE(c.ok());
  return std::string(c.status().message());
}

TEST_CASE("http.api_keys: a YAML list of mappings, key or key_file, beside http.api_key", "[cpu]") {
  const std::string dir = testing::TempDir();
  REQUIRE(WriteFileAtomically(dir + "/team-b.key", "sk-from-file-b\n").ok());
  absl::StatusOr<PrefillDaemonConfig> c = ReadWithHttp(
      "  api_key: sk-legacy\n"
      "  api_keys:\n"
      "    - name: team-a           # a comment\n"
      "      key: sk-team-a\n"
      "      max_concurrent: 8\n"
      "      requests_per_s: 5\n"
      "      burst: 10\n"
      "    - name: team-b\n"
      "      key_file: team-b.key\n"
      "      requests_per_s: 0.5\n",
      dir + "/prefill.yaml");
  REQUIRE(c.ok());
  CHECK(c->api_key == "sk-legacy");
  REQUIRE(c->api_keys.size() == 2);
  const ApiKeyConfig& a = c->api_keys[0];
  CHECK(a.name == "team-a");
  CHECK(a.key == "sk-team-a");
  CHECK(a.max_concurrent == 8);
  CHECK(a.requests_per_s == 5);
  CHECK(a.burst == 10);
  CHECK(BucketSize(a) == 10);
  const ApiKeyConfig& b = c->api_keys[1];
  CHECK(b.key == "sk-from-file-b");  // relative to the config, without the newline
  CHECK(b.max_concurrent == 0);
  CHECK(b.burst == 0);
  CHECK(BucketSize(b) == 1);  // a second's worth of 0.5/s, at least one
  CHECK(BucketSize(ApiKeyConfig{"c", "k", 0, 2.5, 0}) == 3);

  absl::StatusOr<PrefillDaemonConfig> none = ReadWithHttp("  port: 0\n");
  REQUIRE(none.ok());
  CHECK(none->api_keys.empty());
}

TEST_CASE("http.api_keys: mistakes stop start-up naming the key", "[cpu]") {
  CHECK_THAT(ErrorOf("  api_keys:\n    - key: sk-x\n"),
             Contains("'http.api_keys[0].name': required, but missing"));
  CHECK_THAT(ErrorOf("  api_keys:\n    - name: a\n"),
             Contains("'http.api_keys[0].key': give exactly one of key and key_file"));
  CHECK_THAT(ErrorOf("  api_keys:\n    - name: a\n      key: k\n      key_file: /f\n"),
             Contains("give exactly one of key and key_file"));
  CHECK_THAT(ErrorOf("  api_keys:\n    - name: a\n      key_file: /nonexistent/key\n"),
             Contains("'http.api_keys[0].key_file'") && Contains("/nonexistent/key"));
  CHECK_THAT(ErrorOf("  api_keys:\n    - name: a b\n      key: k\n"),
             Contains("'http.api_keys[0].name': must be 1 to 64 letters"));
  CHECK_THAT(ErrorOf("  api_keys:\n    - {name: a, key: k1}\n    - {name: a, key: k2}\n"),
             Contains("'http.api_keys[1].name': 'a' is taken"));
  CHECK_THAT(ErrorOf("  api_key: k\n  api_keys:\n    - {name: default, key: k2}\n"),
             Contains("'http.api_keys[0].name': 'default' is taken"));
  CHECK_THAT(ErrorOf("  api_key: k\n  api_keys:\n    - {name: a, key: k}\n"),
             Contains("'http.api_keys[0].key': the same secret as another key"));
  CHECK_THAT(ErrorOf("  api_keys:\n    - {name: a, key: k, burst: 3}\n"),
             Contains("'http.api_keys[0].burst': needs requests_per_s"));
  CHECK_THAT(ErrorOf("  api_keys:\n    - {name: a, key: k, max_concurrent: -1}\n"),
             Contains("'http.api_keys[0].max_concurrent'"));
  CHECK_THAT(ErrorOf("  api_keys:\n    - {name: a, key: k, rate: 3}\n"),
             Contains("unknown config key 'http.api_keys[0].rate'"));
}

TEST_CASE("TokenBucket: a full bucket at the start, refill at the rate, capped at the burst",
          "[cpu]") {
  const Time t0{};
  TokenBucket bucket(/*rate=*/2, /*burst=*/3, t0);
  for (int i = 0; i < 3; ++i) CHECK(bucket.TryTake(t0) == 0);
  CHECK(bucket.TryTake(t0) == Approx(0.5));  // one token in 1/rate seconds
  CHECK(bucket.TryTake(t0 + Seconds(0.2)) == Approx(0.3));
  CHECK(bucket.TryTake(t0 + Seconds(0.5)) == 0);
  CHECK(bucket.Tokens(t0 + Seconds(0.5)) == Approx(0));
  CHECK(bucket.Tokens(t0 + Seconds(100)) == Approx(3));  // never more than the burst
  CHECK(bucket.Tokens(t0 + Seconds(50)) == Approx(3));   // time going back adds nothing
}

// A fake steady clock the ring reads.
struct FakeClock {
  Time now{};
  ApiKeyRing::Clock Fn() {
    return [this] { return now; };
  }
};

std::unique_ptr<ApiKeyRing> Ring(std::vector<ApiKeyConfig> keys, metrics::Registry* metrics,
                                 FakeClock* clock) {
  absl::StatusOr<std::unique_ptr<ApiKeyRing>> ring =
      ApiKeyRing::Create(std::move(keys), metrics, clock->Fn());
  REQUIRE(ring.ok());
  return std::move(*ring);
}

double Metric(const metrics::Registry& registry, const std::string& series) {
  const std::string text = registry.Render();
  const size_t at = text.find("\n" + series + " ");
  REQUIRE(at != std::string::npos);
  return std::stod(text.substr(at + series.size() + 2));
}

TEST_CASE("ApiKeyRing: the rate limit refuses with the seconds until a token, rounded up",
          "[cpu]") {
  FakeClock clock;
  metrics::Registry registry;
  auto ring =
      Ring({{"slow", "sk-slow", 0, 0.25, 2}, {"free", "sk-free", 0, 0, 0}}, &registry, &clock);
  CHECK(ring->Admit("sk-slow").ok());
  CHECK(ring->Admit("sk-slow").ok());
  clock.now += Seconds(1);  // a quarter of a token back: 3 s to go
  absl::StatusOr<ApiKeyLease> refused = ring->Admit("sk-slow");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(RetryAfterSeconds(refused.status()) == 3);
  CHECK(http::ErrorCode(refused.status()) == "rate_limit_exceeded");
  CHECK(http::HttpStatusFor(refused.status()) == 429);
  CHECK_THAT(std::string(refused.status().message()), Contains("'slow'"));
  CHECK_THAT(std::string(refused.status().message()), !Contains("sk-slow"));
  clock.now += Seconds(2.9);  // 0.025 s short of a token: still refused, 1 s (rounded up)
  refused = ring->Admit("sk-slow");
  REQUIRE_FALSE(refused.ok());
  CHECK(RetryAfterSeconds(refused.status()) == 1);
  // The refusals took no token: once the first is back, one request passes.
  clock.now += Seconds(0.2);
  CHECK(ring->Admit("sk-slow").ok());
  CHECK_FALSE(ring->Admit("sk-slow").ok());
  // Another key is not limited by this one's bucket.
  for (int i = 0; i < 100; ++i) CHECK(ring->Admit("sk-free").ok());
  CHECK(Metric(registry, "scd_api_key_limited_total{key=\"slow\",reason=\"rate\"}") == 3);
  CHECK(Metric(registry, "scd_api_key_limited_total{key=\"free\",reason=\"rate\"}") == 0);
}

TEST_CASE("ApiKeyRing: concurrency slots come back with the lease, however it ends", "[cpu]") {
  FakeClock clock;
  metrics::Registry registry;
  auto ring = Ring({{"a", "sk-a", 2, 0, 0}, {"b", "sk-b", 1, 0, 0}}, &registry, &clock);
  const std::string in_flight_a = "scd_api_key_in_flight{key=\"a\"}";
  absl::StatusOr<ApiKeyLease> first = ring->Admit("sk-a");
  REQUIRE(first.ok());
  CHECK(first->key_name() == "a");
  std::optional<ApiKeyLease> second;
  {
    absl::StatusOr<ApiKeyLease> l = ring->Admit("sk-a");
    REQUIRE(l.ok());
    second.emplace(std::move(*l));  // moved: the moved-from lease gives nothing back
  }
  CHECK(Metric(registry, in_flight_a) == 2);
  absl::StatusOr<ApiKeyLease> third = ring->Admit("sk-a");
  REQUIRE_FALSE(third.ok());
  CHECK(third.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(RetryAfterSeconds(third.status()) == 1);
  CHECK(http::ErrorCode(third.status()) == "rate_limit_exceeded");
  // Key b has its own slot.
  absl::StatusOr<ApiKeyLease> b = ring->Admit("sk-b");
  CHECK(b.ok());
  CHECK_FALSE(ring->Admit("sk-b").ok());
  // Released explicitly (twice: idempotent), then by destruction.
  first->Release();
  first->Release();
  CHECK(Metric(registry, in_flight_a) == 1);
  absl::StatusOr<ApiKeyLease> again = ring->Admit("sk-a");
  CHECK(again.ok());
  CHECK_FALSE(ring->Admit("sk-a").ok());
  second.reset();
  CHECK(Metric(registry, in_flight_a) == 1);
  CHECK(ring->Admit("sk-a").ok());  // a temporary: released at once
  CHECK(Metric(registry, in_flight_a) == 1);
  CHECK(Metric(registry, "scd_api_key_limited_total{key=\"a\",reason=\"concurrency\"}") == 2);
  CHECK(Metric(registry, "scd_api_key_limited_total{key=\"b\",reason=\"concurrency\"}") == 1);
}

TEST_CASE("ApiKeyRing: unknown keys, no keys, bearer headers, bad sets of keys", "[cpu]") {
  FakeClock clock;
  auto ring = Ring({{"a", "sk-a", 0, 0, 0}}, nullptr, &clock);
  CHECK(ring->Valid("sk-a"));
  for (const char* wrong : {"", "sk-", "sk-a ", "sk-aa", "SK-A"}) {
    INFO(wrong);
    CHECK_FALSE(ring->Valid(wrong));
    absl::StatusOr<ApiKeyLease> l = ring->Admit(wrong);
    REQUIRE_FALSE(l.ok());
    CHECK(l.status().code() == absl::StatusCode::kUnauthenticated);
  }
  auto open = Ring({}, nullptr, &clock);
  CHECK(open->empty());
  CHECK(open->Valid("anything"));
  absl::StatusOr<ApiKeyLease> anyone = open->Admit("");
  REQUIRE(anyone.ok());
  CHECK(anyone->key_name().empty());

  CHECK(ApiKeyRing::BearerKey("Bearer sk-a") == "sk-a");
  CHECK(ApiKeyRing::BearerKey("bearer sk-a") == "sk-a");
  CHECK(ApiKeyRing::BearerKey("Basic c2stYQ==").empty());
  CHECK(ApiKeyRing::BearerKey("sk-a").empty());

  CHECK_FALSE(ApiKeyRing::Create({{"a", "k", 0, 0, 0}, {"a", "k2", 0, 0, 0}}, nullptr).ok());
  CHECK_FALSE(ApiKeyRing::Create({{"a", "k", 0, 0, 0}, {"b", "k", 0, 0, 0}}, nullptr).ok());
  CHECK_FALSE(ApiKeyRing::Create({{"a", "", 0, 0, 0}}, nullptr).ok());
}

}  // namespace
}  // namespace scd
