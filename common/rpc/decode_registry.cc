// DecodeRegistry: admission, leases, quarantine and least-load routing (see the header for
// the invariants).
#include "common/rpc/decode_registry.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rpc/cluster_token.h"

namespace scd::rpc {
namespace {

// Lower-cases `hex`; InvalidArgument naming `what` unless it is non-empty hex.
absl::StatusOr<std::string> NormalizeDigest(const std::string& hex, const std::string& what) {
  if (hex.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", hex, "' is not hex"));
    }
  }
  return absl::AsciiStrToLower(hex);
}

// The requests the instance holds now: ours (exact) plus those it reported that were not
// ours when it reported them (other routers).
int Load(int in_flight, int reported_active, int reported_queue, int in_flight_at_report) {
  return in_flight + std::max(0, reported_active + reported_queue - in_flight_at_report);
}

}  // namespace

DecodeLease::DecodeLease(DecodeLease&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)),
      route_(std::move(other.route_)),
      epoch_(other.epoch_) {}

DecodeLease& DecodeLease::operator=(DecodeLease&& other) noexcept {
  if (this != &other) {
    Release();
    registry_ = std::exchange(other.registry_, nullptr);
    route_ = std::move(other.route_);
    epoch_ = other.epoch_;
  }
  return *this;
}

void DecodeLease::Release() {
  if (registry_ == nullptr) return;
  std::exchange(registry_, nullptr)->Release(route_.instance_id, epoch_);
}

absl::StatusOr<std::unique_ptr<DecodeRegistry>> DecodeRegistry::Create(
    DecodeRegistryOptions options) {
  if (options.heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("control plane heartbeat_interval must be positive");
  }
  if (options.lease <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(
        absl::StrCat("control plane lease (", absl::FormatDuration(options.lease),
                     ") must exceed heartbeat_interval (",
                     absl::FormatDuration(options.heartbeat_interval), ")"));
  }
  if (options.failure_quarantine < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("control plane failure_quarantine must not be negative");
  }
  if (options.failure_quarantine == absl::ZeroDuration()) {
    options.failure_quarantine = options.lease;
  }
  for (auto& [model, digest] : options.expected_pair_digests) {
    absl::StatusOr<std::string> normalized =
        NormalizeDigest(digest, absl::StrCat("expected pair digest of model '", model, "'"));
    if (!normalized.ok()) return normalized.status();
    digest = *std::move(normalized);
  }
  return std::unique_ptr<DecodeRegistry>(new DecodeRegistry(std::move(options)));
}

DecodeRegistry::DecodeRegistry(DecodeRegistryOptions options)
    : options_(std::move(options)), expected_digests_(options_.expected_pair_digests) {}

bool DecodeRegistry::TokenMatches(const std::string& token) const {
  // Constant time in the token's contents, so response timing does not leak a prefix.
  return ClusterTokenMatches(options_.cluster_token, token);
}

void DecodeRegistry::ExpireLocked(absl::Time now) {
  for (auto it = instances_.begin(); it != instances_.end();) {
    if (now - it->second.last_heartbeat > options_.lease) {
      it = instances_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status DecodeRegistry::SetExpectedDigest(const std::string& model,
                                               const std::string& digest_hex) {
  absl::StatusOr<std::string> digest =
      NormalizeDigest(digest_hex, absl::StrCat("expected pair digest of model '", model, "'"));
  if (!digest.ok()) return digest.status();
  scd::MutexLock lock(&mu_);
  expected_digests_[model] = *digest;
  for (auto it = instances_.begin(); it != instances_.end();) {
    const DecodeInstanceInfo& info = it->second.info;
    if (info.model_name == model && info.pair_digest != *digest) {
      it = instances_.erase(it);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RegisterOutcome> DecodeRegistry::Register(const DecodeInstanceInfo& info,
                                                         const std::string& cluster_token) {
  // The token is checked first so that a peer without it learns nothing else.
  if (!TokenMatches(cluster_token)) {
    return absl::PermissionDeniedError(
        absl::StrCat("decode instance '", info.instance_id,
                     "' refused: cluster token does not match the control plane's"));
  }
  if (info.instance_id.empty()) return absl::InvalidArgumentError("instance_id is empty");
  if (info.model_name.empty()) return absl::InvalidArgumentError("model_name is empty");
  if (info.capacity <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity must be positive, got ", info.capacity));
  }
  if (info.rpc_address.empty()) return absl::InvalidArgumentError("rpc_address is empty");
  if (info.data_plane_address.empty()) {
    return absl::InvalidArgumentError("data_plane_address is empty");
  }
  absl::StatusOr<std::string> digest = NormalizeDigest(info.pair_digest, "pair_digest");
  if (!digest.ok()) return digest.status();

  const absl::Time now = Now();
  scd::MutexLock lock(&mu_);
  ExpireLocked(now);
  auto expected = expected_digests_.find(info.model_name);
  if (expected == expected_digests_.end()) {
    std::vector<std::string> models;
    for (const auto& [model, unused] : expected_digests_) models.push_back(model);
    return absl::NotFoundError(absl::StrCat(
        "model '", info.model_name, "' is not served by this prefill daemon (serving: ",
        models.empty() ? "none" : absl::StrJoin(models, ", "), ")"));
  }
  if (expected->second != *digest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pair digest mismatch for model '", info.model_name, "': decode instance '",
        info.instance_id, "' has ", *digest, ", the prefill daemon expects ", expected->second,
        " (different base model, specialist or calibration artifact)"));
  }

  RegisterOutcome outcome;
  outcome.heartbeat_interval = options_.heartbeat_interval;
  outcome.lease = options_.lease;
  auto [it, inserted] = instances_.try_emplace(info.instance_id);
  Entry& entry = it->second;
  outcome.refreshed = !inserted;
  if (inserted || entry.info.model_name != info.model_name) {
    // A new entry, or an id that moved to another model: load and leases start afresh.
    entry = Entry();
    entry.epoch = next_epoch_++;
    entry.registered_at = now;
  }
  entry.info = info;
  entry.info.pair_digest = *digest;
  entry.last_heartbeat = now;
  entry.quarantined_until = absl::InfinitePast();
  return outcome;
}

absl::StatusOr<bool> DecodeRegistry::Heartbeat(const std::string& instance_id,
                                               const std::string& cluster_token,
                                               const LoadReport& load) {
  if (!TokenMatches(cluster_token)) {
    return absl::PermissionDeniedError(
        absl::StrCat("heartbeat from '", instance_id, "' refused: cluster token does not match"));
  }
  const absl::Time now = Now();
  scd::MutexLock lock(&mu_);
  ExpireLocked(now);
  auto it = instances_.find(instance_id);
  if (it == instances_.end()) return false;
  Entry& entry = it->second;
  entry.last_heartbeat = now;
  entry.reported_active = std::max(0, load.active_requests);
  entry.reported_queue_depth = std::max(0, load.queue_depth);
  entry.in_flight_at_report = entry.in_flight;
  entry.rates = load.rates;
  // A queue beside free slots is no sign of full ones: a request waits for the next step to
  // join the batch. The inference serves instances that do not report their slots.
  if (load.batch_slots > 0) {
    entry.full_slots = load.batch_slots;
  } else if (entry.reported_queue_depth > 0) {
    entry.full_slots = std::max(entry.full_slots, entry.reported_active);
  }
  return true;
}

absl::StatusOr<bool> DecodeRegistry::Deregister(const std::string& instance_id,
                                                const std::string& cluster_token) {
  if (!TokenMatches(cluster_token)) {
    return absl::PermissionDeniedError(absl::StrCat("deregistration of '", instance_id,
                                                    "' refused: cluster token does not match"));
  }
  scd::MutexLock lock(&mu_);
  return instances_.erase(instance_id) > 0;
}

absl::StatusOr<DecodeRegistry::Choice> DecodeRegistry::ChooseLocked(const std::string& model,
                                                                    absl::Time now) {
  if (expected_digests_.count(model) == 0) {
    return absl::NotFoundError(absl::StrCat("model '", model, "' is not served here"));
  }
  // Candidates in id order; the scan starts at the round-robin cursor and keeps the first
  // strictly least-loaded one, so equal loads take turns.
  std::vector<Entry*> candidates;
  int quarantined = 0;
  for (auto& [id, entry] : instances_) {
    if (entry.info.model_name != model) continue;
    if (entry.quarantined_until > now) {
      ++quarantined;
      continue;
    }
    candidates.push_back(&entry);
  }
  if (candidates.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no live decode instance for model '", model, "'",
                     quarantined > 0 ? absl::StrCat(" (", quarantined, " failed recently)") : ""));
  }
  const uint64_t cursor = round_robin_[model];
  const size_t n = candidates.size();
  Choice best;
  int best_load = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t index = (cursor + k) % n;
    Entry* entry = candidates[index];
    const int load = Load(entry->in_flight, entry->reported_active, entry->reported_queue_depth,
                          entry->in_flight_at_report);
    if (load >= entry->info.capacity) continue;
    // load/capacity < best_load/best_capacity, without division.
    if (best.entry == nullptr ||
        int64_t{load} * best.entry->info.capacity < int64_t{best_load} * entry->info.capacity) {
      best.entry = entry;
      best.index = index;
      best_load = load;
    }
  }
  if (best.entry == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", n, " decode instance(s) of model '", model, "' are at capacity"));
  }
  return best;
}

absl::StatusOr<DecodeLease> DecodeRegistry::Pick(const std::string& model) {
  const absl::Time now = Now();
  scd::MutexLock lock(&mu_);
  ExpireLocked(now);
  absl::StatusOr<Choice> choice = ChooseLocked(model, now);
  if (!choice.ok()) return choice.status();
  Entry* best = choice->entry;
  round_robin_[model] = choice->index + 1;
  ++best->in_flight;
  DecodeRoute route{best->info.instance_id, best->info.model_name, best->info.data_plane_address,
                    best->info.rpc_address};
  return DecodeLease(this, std::move(route), best->epoch);
}

absl::StatusOr<DecodeInstanceStatus> DecodeRegistry::PeekPick(const std::string& model) {
  const absl::Time now = Now();
  scd::MutexLock lock(&mu_);
  ExpireLocked(now);
  absl::StatusOr<Choice> choice = ChooseLocked(model, now);
  if (!choice.ok()) return choice.status();
  return StatusOf(*choice->entry, now);
}

void DecodeRegistry::Release(const std::string& instance_id, uint64_t epoch) {
  scd::MutexLock lock(&mu_);
  auto it = instances_.find(instance_id);
  if (it == instances_.end() || it->second.epoch != epoch) return;
  Entry& entry = it->second;
  // in_flight_at_report stays: the last report still counts this request, and the external
  // share (reported - in_flight_at_report) must not grow because ours shrank.
  entry.in_flight = std::max(0, entry.in_flight - 1);
}

DecodeInstanceStatus DecodeRegistry::StatusOf(const Entry& entry, absl::Time now) {
  DecodeInstanceStatus status;
  status.info = entry.info;
  status.in_flight = entry.in_flight;
  status.reported_active = entry.reported_active;
  status.reported_queue_depth = entry.reported_queue_depth;
  status.load = Load(entry.in_flight, entry.reported_active, entry.reported_queue_depth,
                     entry.in_flight_at_report);
  status.full_slots = entry.full_slots;
  status.rates = entry.rates;
  status.registered_at = entry.registered_at;
  status.last_heartbeat = entry.last_heartbeat;
  status.quarantined = entry.quarantined_until > now;
  return status;
}

void DecodeRegistry::MarkFailed(const std::string& instance_id) {
  const absl::Time now = Now();
  scd::MutexLock lock(&mu_);
  auto it = instances_.find(instance_id);
  if (it == instances_.end()) return;
  it->second.quarantined_until = now + options_.failure_quarantine;
}

std::vector<DecodeInstanceStatus> DecodeRegistry::Instances() {
  const absl::Time now = Now();
  scd::MutexLock lock(&mu_);
  ExpireLocked(now);
  std::vector<DecodeInstanceStatus> result;
  for (const auto& [id, entry] : instances_) result.push_back(StatusOf(entry, now));
  std::sort(result.begin(), result.end(), [](const auto& a, const auto& b) {
    return std::tie(a.info.model_name, a.info.instance_id) <
           std::tie(b.info.model_name, b.info.instance_id);
  });
  return result;
}

int DecodeRegistry::LiveInstanceCount(const std::string& model) {
  const absl::Time now = Now();
  scd::MutexLock lock(&mu_);
  ExpireLocked(now);
  int count = 0;
  for (const auto& [id, entry] : instances_) {
    if (entry.info.model_name == model && entry.quarantined_until <= now) ++count;
  }
  return count;
}

std::vector<std::string> DecodeRegistry::Models() {
  scd::MutexLock lock(&mu_);
  std::vector<std::string> models;
  for (const auto& [model, unused] : expected_digests_) models.push_back(model);
  return models;
}

}  // namespace scd::rpc
