// ApiKeyRing: the prefill daemon's API keys (http.api_key and http.api_keys[]), each with
// optional limits of its own, checked at both front doors (the OpenAI HTTP routes and gRPC
// Generate) before any work is spent on a request:
//   - max_concurrent: the key's requests in flight. A request holds an ApiKeyLease from its
//     admission until it ends, however it ends (answered, failed, client gone, stream
//     cancelled): the lease gives its slot back when it is released or destroyed;
//   - requests_per_s and burst: a token bucket per key (token_bucket.h).
// A request over a limit is refused at once with RESOURCE_EXHAUSTED (HTTP 429 with the OpenAI
// code "rate_limit_exceeded"; gRPC RESOURCE_EXHAUSTED) carrying a retry delay in whole seconds
// (admission.h's WithRetryAfter; the HTTP and gRPC edges send it as Retry-After and a
// `retry-after` trailer): the seconds until the bucket holds a token again, rounded up, or 1
// for the concurrency limit, whose slots free up as requests end. Limits are per key, so one
// client at its limit leaves the others' untouched, and a refused request takes neither a
// slot nor a token.
//
// A presented key is compared with every key in constant time (ConstantTimeEquals, and no early
// exit), so the response time tells nothing about the keys. Names label logs and metrics and
// are never secret.
//
// /metrics: scd_api_key_limited_total{key,reason} (reason concurrency or rate) and
// scd_api_key_in_flight{key}, both present from the start for every key.
//
// Thread-safe.
#ifndef SCD_PREFILL_SERVER_API_KEYS_H_
#define SCD_PREFILL_SERVER_API_KEYS_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics/registry.h"
#include "prefill_server/token_bucket.h"

namespace scd {

// One key as the config gives it (http.api_keys[]; docs/CONFIG.md).
struct ApiKeyConfig {
  std::string name;           // metric label and log field; never the secret
  std::string key;            // the secret (read from key_file when the config names one)
  int max_concurrent = 0;     // requests in flight; 0: unlimited
  double requests_per_s = 0;  // token bucket rate; 0: unlimited
  int burst = 0;              // bucket size; 0: one second's worth of requests, at least 1
};

// The name http.api_key's key goes by (it has no name of its own in the config).
inline constexpr char kDefaultApiKeyName[] = "default";

// The bucket size a key's limits give (burst, or one second's worth of requests, at least 1).
double BucketSize(const ApiKeyConfig& key);

class ApiKeyRing;

// One admitted request's concurrency slot. Move-only; releasing is idempotent and the
// destructor releases what is left. An empty lease (no keys configured) holds nothing.
class ApiKeyLease {
 public:
  ApiKeyLease() = default;
  ~ApiKeyLease() { Release(); }
  ApiKeyLease(ApiKeyLease&& other) noexcept : key_(other.key_) { other.key_ = nullptr; }
  ApiKeyLease& operator=(ApiKeyLease&& other) noexcept;
  ApiKeyLease(const ApiKeyLease&) = delete;
  ApiKeyLease& operator=(const ApiKeyLease&) = delete;

  void Release();
  // The key's name; "" for an empty lease.
  std::string key_name() const;

 private:
  friend class ApiKeyRing;
  struct Key;
  explicit ApiKeyLease(Key* key) : key_(key) {}
  Key* key_ = nullptr;
};

class ApiKeyRing {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // InvalidArgument for a key without a name or secret, or two keys sharing a name or a
  // secret. `metrics` may be null; `clock` (default: the steady clock) drives the buckets.
  static absl::StatusOr<std::unique_ptr<ApiKeyRing>> Create(std::vector<ApiKeyConfig> keys,
                                                            metrics::Registry* metrics,
                                                            Clock clock = nullptr);
  ~ApiKeyRing();
  ApiKeyRing(const ApiKeyRing&) = delete;
  ApiKeyRing& operator=(const ApiKeyRing&) = delete;

  // No keys: no authentication, every request admitted.
  bool empty() const { return keys_.empty(); }
  // Whether `presented` is one of the keys (always true when empty()).
  bool Valid(const std::string& presented) const;
  // Admits a request that presents `presented`: its lease, or UNAUTHENTICATED when it is no
  // key, or RESOURCE_EXHAUSTED with a retry delay when the key is at a limit. With no keys, an
  // empty lease.
  absl::StatusOr<ApiKeyLease> Admit(const std::string& presented);

  // The key in an `Authorization: Bearer <key>` header value ("" when it is not one).
  static std::string BearerKey(const std::string& authorization);

 private:
  explicit ApiKeyRing(Clock clock);
  // The key `presented` matches, or null; every key is compared.
  ApiKeyLease::Key* Find(const std::string& presented) const;

  Clock clock_;
  std::vector<std::unique_ptr<ApiKeyLease::Key>> keys_;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_API_KEYS_H_
