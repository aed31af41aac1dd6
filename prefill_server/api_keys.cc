// See api_keys.h.
#include "prefill_server/api_keys.h"

#include <cmath>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/constant_time.h"
#include "common/http/openai_error.h"
#include "prefill_server/admission.h"

namespace scd {

// One key, its limits and its counts. `mutex` guards in_flight and bucket, so that a request's
// check of both limits and its taking of a slot and a token are one step.
struct ApiKeyLease::Key {
  ApiKeyConfig config;
  std::mutex mutex;
  int in_flight = 0;
  std::optional<TokenBucket> bucket;  // with requests_per_s only
  metrics::Gauge* in_flight_gauge = nullptr;
  metrics::Counter* limited_concurrency = nullptr;
  metrics::Counter* limited_rate = nullptr;
};

double BucketSize(const ApiKeyConfig& key) {
  if (key.burst > 0) return key.burst;
  return std::max(1.0, std::ceil(key.requests_per_s));
}

ApiKeyLease& ApiKeyLease::operator=(ApiKeyLease&& other) noexcept {
  if (this != &other) {
    Release();
    key_ = other.key_;
    other.key_ = nullptr;
  }
  return *this;
}

void ApiKeyLease::Release() {
  if (key_ == nullptr) return;
  Key* key = key_;
  key_ = nullptr;
  std::lock_guard<std::mutex> lock(key->mutex);
  --key->in_flight;
  if (key->in_flight_gauge != nullptr) key->in_flight_gauge->Set(key->in_flight);
}

std::string ApiKeyLease::key_name() const { return key_ != nullptr ? key_->config.name : ""; }

absl::StatusOr<std::unique_ptr<ApiKeyRing>> ApiKeyRing::Create(std::vector<ApiKeyConfig> keys,
                                                               metrics::Registry* metrics,
                                                               Clock clock) {
  if (!clock) clock = [] { return std::chrono::steady_clock::now(); };
  std::unique_ptr<ApiKeyRing> ring(new ApiKeyRing(std::move(clock)));
  std::set<std::string> names, secrets;
  for (ApiKeyConfig& c : keys) {
    if (c.name.empty() || c.key.empty()) {
      return absl::InvalidArgumentError("an API key needs a name and a secret");
    }
    if (!names.insert(c.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("the API key name '", c.name, "' is given twice"));
    }
    if (!secrets.insert(c.key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("the API key '", c.name, "' has the same secret as another key"));
    }
    auto key = std::make_unique<ApiKeyLease::Key>();
    if (c.requests_per_s > 0) key->bucket.emplace(c.requests_per_s, BucketSize(c), ring->clock_());
    key->config = std::move(c);
    ring->keys_.push_back(std::move(key));
  }
  if (metrics == nullptr || ring->keys_.empty()) return ring;
  absl::StatusOr<metrics::CounterFamily*> limited = metrics->AddCounterFamily(
      "scd_api_key_limited_total",
      "Requests refused at once (429 / RESOURCE_EXHAUSTED) for their API key's limit, by key "
      "name and reason: concurrency (max_concurrent in flight), rate (requests_per_s).",
      {"key", "reason"});
  if (!limited.ok()) return limited.status();
  absl::StatusOr<metrics::GaugeFamily*> in_flight = metrics->AddGaugeFamily(
      "scd_api_key_in_flight", "Requests in flight per API key name.", {"key"});
  if (!in_flight.ok()) return in_flight.status();
  for (auto& key : ring->keys_) {
    const std::string& name = key->config.name;
    key->in_flight_gauge = (*in_flight)->WithLabels({name}).value();
    key->in_flight_gauge->Set(0);
    key->limited_concurrency = (*limited)->WithLabels({name, "concurrency"}).value();
    key->limited_rate = (*limited)->WithLabels({name, "rate"}).value();
  }
  return ring;
}

ApiKeyRing::ApiKeyRing(Clock clock) : clock_(std::move(clock)) {}

ApiKeyRing::~ApiKeyRing() = default;

ApiKeyLease::Key* ApiKeyRing::Find(const std::string& presented) const {
  ApiKeyLease::Key* found = nullptr;
  for (const auto& key : keys_) {
    // No early exit: every key costs its comparison whether an earlier one matched or not.
    const bool match = ConstantTimeEquals(presented, key->config.key);
    if (match) found = key.get();
  }
  return found;
}

bool ApiKeyRing::Valid(const std::string& presented) const {
  return empty() || Find(presented) != nullptr;
}

absl::StatusOr<ApiKeyLease> ApiKeyRing::Admit(const std::string& presented) {
  if (empty()) return ApiKeyLease();
  ApiKeyLease::Key* key = Find(presented);
  if (key == nullptr) {
    return http::WithErrorCode(absl::UnauthenticatedError("the API key is not valid"),
                               "invalid_api_key");
  }
  const ApiKeyConfig& c = key->config;
  std::lock_guard<std::mutex> lock(key->mutex);
  if (c.max_concurrent > 0 && key->in_flight >= c.max_concurrent) {
    if (key->limited_concurrency != nullptr) key->limited_concurrency->Increment();
    return WithRetryAfter(
        http::WithErrorCode(
            absl::ResourceExhaustedError(
                absl::StrCat("API key '", c.name, "' has ", key->in_flight,
                             " requests in flight, its limit (max_concurrent); retry after 1 s")),
            "rate_limit_exceeded"),
        1);
  }
  if (key->bucket.has_value()) {
    const double wait = key->bucket->TryTake(clock_());
    if (wait > 0) {
      const int retry_after = std::max(1, static_cast<int>(std::ceil(wait)));
      if (key->limited_rate != nullptr) key->limited_rate->Increment();
      return WithRetryAfter(
          http::WithErrorCode(
              absl::ResourceExhaustedError(absl::StrCat(
                  "API key '", c.name, "' is over its rate limit of ", c.requests_per_s,
                  " requests/s (burst ", BucketSize(c), "); retry after ", retry_after, " s")),
              "rate_limit_exceeded"),
          retry_after);
    }
  }
  ++key->in_flight;
  if (key->in_flight_gauge != nullptr) key->in_flight_gauge->Set(key->in_flight);
  return ApiKeyLease(key);
}

std::string ApiKeyRing::BearerKey(const std::string& authorization) {
  // The scheme is case-insensitive (RFC 7235); the key itself is compared as sent.
  constexpr size_t kScheme = 7;  // "Bearer "
  if (!absl::StartsWithIgnoreCase(authorization, "Bearer ")) return "";
  return authorization.substr(kScheme);
}

}  // namespace scd
