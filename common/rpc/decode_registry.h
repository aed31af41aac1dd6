// DecodeRegistry: the control plane's state on the prefill daemon. It knows which decode
// instances serve which specialist, how loaded each is, and whether each is alive, and it
// picks where the next request of a model goes.
//
// Invariants:
//  - Admission: an instance is admitted only with the cluster token (PERMISSION_DENIED) and
//    with the pair digest the prefill daemon computed for that model (FAILED_PRECONDITION
//    naming both), so a consumer never rebuilds KV from codes made for another pair (SCD
//    paper: codes are calibrated per producer/consumer pair). Registering again is idempotent.
//  - Liveness: an instance whose last Register/Heartbeat is older than `lease` is removed
//    (checked on every call against the injectable clock). MarkFailed takes an instance out
//    of routing for `failure_quarantine` so that requests route around a daemon that just
//    failed before its lease runs out; re-registering ends the quarantine.
//  - Load: load = requests routed here and not yet released (exact) + the requests the
//    instance reported at its last heartbeat that were not ours (other routers). Pick returns
//    the live instance with the lowest load/capacity; ties rotate round-robin. Instances at
//    capacity are not picked.
//
// Thread-safe. The registry must outlive every DecodeLease it hands out.
#ifndef SCD_COMMON_RPC_DECODE_REGISTRY_H_
#define SCD_COMMON_RPC_DECODE_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/mutex.h"

namespace scd::rpc {

// What a decode daemon announces at Register (mirrors scd.v1.RegisterRequest).
struct DecodeInstanceInfo {
  std::string instance_id;
  std::string model_name;
  std::string pair_digest;  // hex; stored lower-case
  int capacity = 0;         // max concurrent requests, > 0
  std::string data_plane_address;
  std::string rpc_address;
};

// Seconds per token of a decode daemon's recent work (exponentially weighted over what it
// served, for any router), for the prefill daemons' mode: auto: a payload's rebuild by codec
// mode name ("scd", "raw", ...; the oracle's is its prefill of the tokens), and its own prefill
// of a suffix. Empty / 0 until measured.
struct StageRates {
  std::map<std::string, double> rebuild_seconds_per_token;
  double prefill_seconds_per_token = 0;
};

// One instance as the registry sees it now.
struct DecodeInstanceStatus {
  DecodeInstanceInfo info;
  int in_flight = 0;             // routed by this registry and not yet released
  int reported_active = 0;       // from the last heartbeat
  int reported_queue_depth = 0;  // from the last heartbeat
  int load = 0;                  // what Pick weighs: in_flight + the reported requests not ours
  // Its batch slots: as it reports them, or else the most requests it reported running while
  // it also reported a queue (once seen full). 0: unknown.
  int full_slots = 0;
  StageRates rates;  // as last reported
  absl::Time registered_at;
  absl::Time last_heartbeat;
  bool quarantined = false;  // MarkFailed and the quarantine has not ended
};

// What a decode instance reports in each heartbeat (mirrors scd.v1.HeartbeatRequest).
struct LoadReport {
  int active_requests = 0;  // decoding now, from any router
  int queue_depth = 0;      // accepted, waiting for a batch slot
  int batch_slots = 0;      // the sequences one decode step can run; 0: not reported
  StageRates rates{};
};

struct RegisterOutcome {
  bool refreshed = false;  // the instance id was already registered
  absl::Duration heartbeat_interval;
  absl::Duration lease;
};

struct DecodeRegistryOptions {
  // The shared secret decode daemons must present. Empty admits any token (development
  // only; the daemons' configs should always set one).
  std::string cluster_token;
  // model name → hex pair digest the prefill daemon computed for it. More can be added later
  // with SetExpectedDigest (models that finish loading after the server starts).
  std::map<std::string, std::string> expected_pair_digests;
  // Told to instances at Register.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Must exceed heartbeat_interval (a lease of 3-5 intervals survives a lost heartbeat).
  absl::Duration lease = absl::Seconds(5);
  // How long MarkFailed keeps an instance out of routing. Zero: `lease`.
  absl::Duration failure_quarantine = absl::ZeroDuration();
  // Time source; absl::Now when empty. Tests inject a fake clock.
  std::function<absl::Time()> clock;
};

struct DecodeRoute {
  std::string instance_id;
  std::string model_name;
  std::string data_plane_address;
  std::string rpc_address;
};

class DecodeRegistry;

// A routing decision that holds one unit of the instance's load until released (explicitly
// or by the destructor), so that error paths and disconnected clients cannot leak load.
// Move-only.
class DecodeLease {
 public:
  DecodeLease() = default;
  DecodeLease(DecodeLease&& other) noexcept;
  DecodeLease& operator=(DecodeLease&& other) noexcept;
  DecodeLease(const DecodeLease&) = delete;
  DecodeLease& operator=(const DecodeLease&) = delete;
  ~DecodeLease() { Release(); }

  const DecodeRoute& route() const { return route_; }
  bool held() const { return registry_ != nullptr; }
  // Gives the load back. Idempotent.
  void Release();

 private:
  friend class DecodeRegistry;
  DecodeLease(DecodeRegistry* registry, DecodeRoute route, uint64_t epoch)
      : registry_(registry), route_(std::move(route)), epoch_(epoch) {}

  DecodeRegistry* registry_ = nullptr;
  DecodeRoute route_;
  uint64_t epoch_ = 0;
};

class DecodeRegistry {
 public:
  // InvalidArgument when lease <= heartbeat_interval, an interval is not positive, or an
  // expected digest is not hex.
  static absl::StatusOr<std::unique_ptr<DecodeRegistry>> Create(DecodeRegistryOptions options);

  DecodeRegistry(const DecodeRegistry&) = delete;
  DecodeRegistry& operator=(const DecodeRegistry&) = delete;

  // Adds or replaces the digest expected for `model`; instances of `model` registered with
  // another digest are removed. InvalidArgument when `digest_hex` is not hex.
  absl::Status SetExpectedDigest(const std::string& model, const std::string& digest_hex);

  // Admits `info` (see the invariants above). Errors: PermissionDenied (token),
  // InvalidArgument (empty id/model/addresses, capacity <= 0, digest not hex), NotFound (model
  // not served here), FailedPrecondition (digest mismatch, naming both digests).
  absl::StatusOr<RegisterOutcome> Register(const DecodeInstanceInfo& info,
                                           const std::string& cluster_token);

  // Renews the lease and records the reported load. False (not an error) when the instance
  // is unknown: it must register again. PermissionDenied for a wrong token.
  absl::StatusOr<bool> Heartbeat(const std::string& instance_id, const std::string& cluster_token,
                                 const LoadReport& load);

  // Removes the instance. False when it was not registered. PermissionDenied for a wrong
  // token.
  absl::StatusOr<bool> Deregister(const std::string& instance_id, const std::string& cluster_token);

  // Routes one request of `model`. NotFound: the model is not served here. Unavailable: no
  // live, unquarantined instance. ResourceExhausted: every live instance is at capacity.
  absl::StatusOr<DecodeLease> Pick(const std::string& model);
  // The instance Pick would route `model`'s next request to now, without routing it (no
  // load taken, the round-robin turn kept): what a prediction of that request weighs. Pick's
  // errors.
  absl::StatusOr<DecodeInstanceStatus> PeekPick(const std::string& model);

  // Takes the instance out of routing for the failure quarantine (a request to it failed at
  // the transport level). Unknown ids are ignored.
  void MarkFailed(const std::string& instance_id);

  // Live instances, sorted by model then id.
  std::vector<DecodeInstanceStatus> Instances();
  // Live, unquarantined instances of `model` (for /ready).
  int LiveInstanceCount(const std::string& model);
  // Models with an expected digest, sorted.
  std::vector<std::string> Models();

  absl::Duration heartbeat_interval() const { return options_.heartbeat_interval; }
  absl::Duration lease() const { return options_.lease; }

 private:
  struct Entry {
    DecodeInstanceInfo info;
    uint64_t epoch = 0;  // changes when the entry is recreated, so stale leases are ignored
    int in_flight = 0;
    int reported_active = 0;
    int reported_queue_depth = 0;
    int in_flight_at_report = 0;  // our in_flight when the last heartbeat arrived
    int full_slots = 0;           // see DecodeInstanceStatus
    StageRates rates;
    absl::Time registered_at;
    absl::Time last_heartbeat;
    absl::Time quarantined_until = absl::InfinitePast();
  };

  // Pick's choice among `model`'s live instances: the entry and its index among them.
  struct Choice {
    Entry* entry = nullptr;
    size_t index = 0;
  };

  explicit DecodeRegistry(DecodeRegistryOptions options);
  friend class DecodeLease;
  absl::StatusOr<Choice> ChooseLocked(const std::string& model, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static DecodeInstanceStatus StatusOf(const Entry& entry, absl::Time now);
  void Release(const std::string& instance_id, uint64_t epoch);

  absl::Time Now() const { return options_.clock ? options_.clock() : absl::Now(); }
  bool TokenMatches(const std::string& token) const;
  // Drops entries whose lease has run out.
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DecodeRegistryOptions options_;
  scd::Mutex mu_;
  std::map<std::string, std::string> expected_digests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Entry> instances_ ABSL_GUARDED_BY(mu_);       // by instance id
  std::map<std::string, uint64_t> round_robin_ ABSL_GUARDED_BY(mu_);  // model → next start
  uint64_t next_epoch_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_DECODE_REGISTRY_H_
