// See etcd_registry.h.
#include "common/rpc/etcd_registry.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/sha256.h"
#include "common/daemon/event_log.h"
#include "common/rpc/control_plane_service.h"
#include "nlohmann/json.hpp"

namespace scd::rpc {
namespace {

using nlohmann::json;

// HMAC-SHA256 (RFC 2104), hex.
std::string HmacSha256Hex(const std::string& key, const std::string& message) {
  constexpr size_t kBlock = 64;
  std::string k = key;
  if (k.size() > kBlock) {
    Sha256::Digest d = Sha256::Hash(k);
    k.assign(reinterpret_cast<const char*>(d.data()), d.size());
  }
  k.resize(kBlock, '\0');
  std::string inner(kBlock, '\0'), outer(kBlock, '\0');
  for (size_t i = 0; i < kBlock; ++i) {
    inner[i] = static_cast<char>(k[i] ^ 0x36);
    outer[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256 h;
  h.Update(inner);
  h.Update(message);
  Sha256::Digest in = h.Finish();
  h.Update(outer);
  h.Update(in.data(), in.size());
  return Sha256::ToHex(h.Finish());
}

std::string IdentityText(const DecodeInstanceInfo& i) {
  return absl::StrCat("scd-decode-announcement-v1\n", i.instance_id, "\n", i.model_name, "\n",
                      i.pair_digest, "\n", i.capacity, "\n", i.rpc_address, "\n",
                      i.data_plane_address);
}

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The rpc_address a refused announcement claims, for the log; empty when it has none.
std::string ClaimedRpcAddress(const std::string& value) {
  const json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  auto it = j.find("rpc_address");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool IsRefusal(const absl::Status& st) {
  return st.code() == absl::StatusCode::kPermissionDenied ||
         st.code() == absl::StatusCode::kUnauthenticated ||
         st.code() == absl::StatusCode::kInvalidArgument;
}

}  // namespace

std::string EtcdDecodePrefix(const std::string& prefix) { return absl::StrCat(prefix, "/decode/"); }

std::string EtcdDecodeKey(const std::string& prefix, const std::string& model,
                          const std::string& instance_id) {
  return absl::StrCat(prefix, "/decode/", model, "/", instance_id);
}

std::string EtcdPrefillKey(const std::string& prefix, const std::string& instance_id) {
  return absl::StrCat(prefix, "/prefill/", instance_id);
}

std::string EncodeDecodeAnnouncement(const DecodeInstanceInfo& info, const LoadReport& load,
                                     const std::string& cluster_token) {
  json j = {{"instance_id", info.instance_id},
            {"model", info.model_name},
            {"pair_digest", info.pair_digest},
            {"capacity", info.capacity},
            {"rpc_address", info.rpc_address},
            {"data_plane_address", info.data_plane_address},
            {"active_requests", load.active_requests},
            {"queue_depth", load.queue_depth},
            {"batch_slots", load.batch_slots},
            {"mac", HmacSha256Hex(cluster_token, IdentityText(info))}};
  if (!load.rates.rebuild_seconds_per_token.empty()) {
    j["rebuild_seconds_per_token"] = load.rates.rebuild_seconds_per_token;
  }
  if (load.rates.prefill_seconds_per_token > 0) {
    j["prefill_seconds_per_token"] = load.rates.prefill_seconds_per_token;
  }
  return j.dump();
}

namespace {

// The optional stage rates of an announcement (positive, finite numbers).
absl::Status ParseRates(const json& j, StageRates* rates) {
  auto rate = [](const json& v) {
    return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
  };
  if (auto it = j.find("rebuild_seconds_per_token"); it != j.end()) {
    if (!it->is_object()) {
      return absl::InvalidArgumentError(
          "the announcement's rebuild_seconds_per_token is not an object");
    }
    for (const auto& [mode, v] : it->items()) {
      if (!rate(v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the announcement's rebuild_seconds_per_token.", mode, " is not a positive number"));
      }
      rates->rebuild_seconds_per_token[mode] = v.get<double>();
    }
  }
  if (auto it = j.find("prefill_seconds_per_token"); it != j.end()) {
    if (!rate(*it)) {
      return absl::InvalidArgumentError(
          "the announcement's prefill_seconds_per_token is not a positive number");
    }
    rates->prefill_seconds_per_token = it->get<double>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DecodeAnnouncement> ParseDecodeAnnouncement(std::string_view value,
                                                           const std::string& cluster_token) {
  json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("the announcement is not a JSON object");
  DecodeAnnouncement a;
  auto str = [&](const char* name, std::string* out) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string()) return false;
    *out = it->get<std::string>();
    return true;
  };
  auto num = [&](const char* name, int* out) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_integer()) return false;
    *out = it->get<int>();
    return true;
  };
  std::string mac;
  DecodeInstanceInfo& i = a.info;
  if (!str("instance_id", &i.instance_id) || !str("model", &i.model_name) ||
      !str("pair_digest", &i.pair_digest) || !num("capacity", &i.capacity) ||
      !str("rpc_address", &i.rpc_address) || !str("data_plane_address", &i.data_plane_address) ||
      !num("active_requests", &a.load.active_requests) ||
      !num("queue_depth", &a.load.queue_depth) || !str("mac", &mac)) {
    return absl::InvalidArgumentError(
        "the announcement lacks a field or has one of the wrong type");
  }
  // Optional: announcements that do not report their batch slots leave them to be inferred.
  if (j.contains("batch_slots") && !num("batch_slots", &a.load.batch_slots)) {
    return absl::InvalidArgumentError("the announcement's batch_slots is not an integer");
  }
  if (absl::Status st = ParseRates(j, &a.load.rates); !st.ok()) return st;
  if (!cluster_token.empty() &&
      !ConstantTimeEqual(mac, HmacSha256Hex(cluster_token, IdentityText(i)))) {
    return absl::PermissionDeniedError(
        "the announcement was not made with this cluster's token (control_plane.cluster_token)");
  }
  return a;
}

EtcdMetrics::EtcdMetrics(metrics::Registry* r) {
  if (r == nullptr) return;
  registered = r->AddGauge("scd_etcd_registered",
                           "1 while this daemon's key is held in etcd under a live lease.")
                   .value();
  registrations = r->AddCounter("scd_etcd_registrations_total",
                                "Times this daemon granted a lease and wrote its key in etcd (1, "
                                "more after etcd lost it).")
                      .value();
  watching = r->AddGauge("scd_etcd_watch_up",
                         "1 while the watch on the decode daemons' keys is established.")
                 .value();
  resyncs =
      r->AddCounter(
           "scd_etcd_watch_syncs_total",
           "Full reads of the decode daemons' keys (1 at start, one more after each lost watch).")
          .value();
  rejected = AddRegistryRejected(r).value();
  errors =
      r->AddCounter(
           "scd_etcd_errors_total",
           "etcd calls that failed (the daemon keeps serving with what it last saw, and retries).")
          .value();
}

// ---- EtcdAnnouncer

absl::StatusOr<std::unique_ptr<EtcdAnnouncer>> EtcdAnnouncer::Create(EtcdClient* client,
                                                                     EtcdAnnouncerOptions options) {
  if (client == nullptr || options.key.empty() || !options.value) {
    return absl::InvalidArgumentError("an etcd announcement needs a client, a key and a value");
  }
  if (options.lease < absl::Seconds(2)) {
    return absl::InvalidArgumentError("control_plane.lease must be at least 2s with etcd");
  }
  if (options.refresh <= absl::ZeroDuration() || options.refresh * 2 >= options.lease) {
    return absl::InvalidArgumentError(
        "the etcd lease refresh must be positive and below half of control_plane.lease");
  }
  return std::unique_ptr<EtcdAnnouncer>(new EtcdAnnouncer(client, std::move(options)));
}

EtcdAnnouncer::~EtcdAnnouncer() { Shutdown(); }

absl::Status EtcdAnnouncer::Start(absl::Duration wait) {
  {
    scd::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("the announcer was started already");
    started_ = true;
  }
  thread_ = std::thread([this] { Loop(); });
  scd::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return registered_ || refused_; };
  mu_.AwaitWithTimeout(absl::Condition(&settled), wait);
  if (registered_) return absl::OkStatus();
  if (refused_) return last_error_;
  return absl::UnavailableError(absl::StrCat(
      "etcd did not answer within ", absl::FormatDuration(wait), " (",
      last_error_.ok() ? "no reply" : std::string(last_error_.message()), "); still trying"));
}

void EtcdAnnouncer::Shutdown() {
  int64_t lease = 0;
  {
    scd::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  {
    scd::MutexLock lock(&mu_);
    lease = revoke_lease_;
  }
  if (lease != 0) {
    absl::Status st = client_->Revoke(lease);  // deletes the key at once
    if (!st.ok()) {
      daemon::LogWarning("etcd_revoke_failed",
                         {{"key", options_.key}, {"message", std::string(st.message())}});
    }
  }
  SetRegistered(false);
}

bool EtcdAnnouncer::registered() {
  scd::MutexLock lock(&mu_);
  return registered_;
}

int64_t EtcdAnnouncer::registrations() {
  scd::MutexLock lock(&mu_);
  return registrations_;
}

absl::Status EtcdAnnouncer::last_error() {
  scd::MutexLock lock(&mu_);
  return last_error_;
}

bool EtcdAnnouncer::SleepUnlessStopped(absl::Duration d) {
  scd::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), d);
  return !stop_;
}

void EtcdAnnouncer::SetRegistered(bool registered) {
  if (options_.metrics != nullptr && options_.metrics->registered != nullptr) {
    options_.metrics->registered->Set(registered ? 1 : 0);
  }
  scd::MutexLock lock(&mu_);
  registered_ = registered;
}

void EtcdAnnouncer::RecordError(const absl::Status& st) {
  if (options_.metrics != nullptr && options_.metrics->errors != nullptr) {
    options_.metrics->errors->Increment();
  }
  scd::MutexLock lock(&mu_);
  if (last_error_.ok() || last_error_.message() != st.message()) {
    daemon::LogWarning("etcd_unavailable", {{"key", options_.key},
                                            {"code", absl::StatusCodeToString(st.code())},
                                            {"message", std::string(st.message())}});
  }
  last_error_ = st;
  if (IsRefusal(st)) refused_ = true;
}

absl::Status EtcdAnnouncer::Register() {
  absl::StatusOr<int64_t> lease = client_->Grant(options_.lease);
  if (!lease.ok()) return lease.status();
  const std::string value = options_.value();
  if (absl::Status st = client_->Put(options_.key, value, *lease); !st.ok()) {
    (void)client_->Revoke(*lease);
    return st;
  }
  lease_id_ = *lease;
  written_ = value;
  last_renewed_ = absl::Now();
  if (options_.metrics != nullptr && options_.metrics->registrations != nullptr) {
    options_.metrics->registrations->Increment();
  }
  {
    scd::MutexLock lock(&mu_);
    ++registrations_;
    revoke_lease_ = lease_id_;
    refused_ = false;
    last_error_ = absl::OkStatus();
  }
  SetRegistered(true);
  daemon::LogInfo("etcd_registered", {{"key", options_.key}, {"lease", lease_id_}});
  return absl::OkStatus();
}

absl::Status EtcdAnnouncer::Refresh() {
  absl::StatusOr<absl::Duration> ttl = client_->KeepAlive(lease_id_);
  if (!ttl.ok()) {
    // Gone, or unreachable for longer than the lease: etcd has dropped the key.
    if (ttl.status().code() == absl::StatusCode::kNotFound ||
        absl::Now() - last_renewed_ > options_.lease) {
      lease_id_ = 0;
      SetRegistered(false);
    }
    return ttl.status();
  }
  last_renewed_ = absl::Now();
  const std::string value = options_.value();
  if (value != written_) {
    if (absl::Status st = client_->Put(options_.key, value, lease_id_); !st.ok()) return st;
    written_ = value;
  }
  {
    scd::MutexLock lock(&mu_);
    last_error_ = absl::OkStatus();
  }
  SetRegistered(true);
  return absl::OkStatus();
}

void EtcdAnnouncer::Loop() {
  absl::Duration backoff = options_.initial_backoff;
  while (true) {
    absl::Status st = lease_id_ == 0 ? Register() : Refresh();
    absl::Duration wait = options_.refresh;
    if (st.ok()) {
      backoff = options_.initial_backoff;
    } else {
      RecordError(st);
      wait = lease_id_ == 0 ? backoff : std::min(backoff, options_.refresh);
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    if (!SleepUnlessStopped(wait)) return;
  }
}

// ---- EtcdDecodeMembership

EtcdDecodeMembership::EtcdDecodeMembership(EtcdClient* client, DecodeRegistry* registry,
                                           EtcdMembershipOptions options)
    : client_(client),
      registry_(registry),
      options_(std::move(options)),
      watch_prefix_(EtcdDecodePrefix(options_.prefix)) {}

EtcdDecodeMembership::~EtcdDecodeMembership() { Shutdown(); }

void EtcdDecodeMembership::Start() {
  thread_ = std::thread([this] { Loop(); });
}

bool EtcdDecodeMembership::WaitSynced(absl::Duration wait) {
  scd::MutexLock lock(&mu_);
  auto synced = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return syncs_ > 0 || stop_; };
  mu_.AwaitWithTimeout(absl::Condition(&synced), wait);
  return syncs_ > 0;
}

void EtcdDecodeMembership::Shutdown() {
  {
    scd::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
}

bool EtcdDecodeMembership::watching() {
  scd::MutexLock lock(&mu_);
  return watching_;
}

int64_t EtcdDecodeMembership::syncs() {
  scd::MutexLock lock(&mu_);
  return syncs_;
}

std::map<std::string, int64_t> EtcdDecodeMembership::rejected() {
  scd::MutexLock lock(&mu_);
  return rejected_;
}

bool EtcdDecodeMembership::SleepUnlessStopped(absl::Duration d) {
  scd::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), d);
  return !stop_;
}

void EtcdDecodeMembership::Loop() {
  const EtcdMetrics* m = options_.metrics;
  absl::Duration backoff = options_.initial_backoff;
  std::string last_error;
  while (true) {
    absl::StatusOr<EtcdRange> range = client_->GetPrefix(watch_prefix_);
    absl::Status st;
    if (range.ok()) {
      OnSnapshot(*range);
      backoff = options_.initial_backoff;
      st = client_->Watch(
          watch_prefix_, range->revision + 1,
          [this](const std::vector<EtcdEvent>& events) { OnEvents(events); }, &cancel_);
      {
        scd::MutexLock lock(&mu_);
        watching_ = false;
      }
      if (m != nullptr && m->watching != nullptr) m->watching->Set(0);
    } else {
      st = range.status();
    }
    if (!SleepUnlessStopped(absl::ZeroDuration())) return;
    if (m != nullptr && m->errors != nullptr) m->errors->Increment();
    if (std::string(st.message()) != last_error) {
      last_error = std::string(st.message());
      daemon::LogWarning("etcd_watch_lost", {{"prefix", watch_prefix_},
                                             {"code", absl::StatusCodeToString(st.code())},
                                             {"message", last_error}});
    }
    if (!SleepUnlessStopped(backoff)) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

void EtcdDecodeMembership::OnSnapshot(const EtcdRange& range) {
  std::set<std::string> present;
  for (const EtcdKeyValue& kv : range.kvs) {
    if (Apply(kv.key, kv.value, kv.mod_revision)) present.insert(kv.key);
  }
  std::vector<std::string> gone;
  for (const auto& [key, id] : admitted_) {
    if (present.count(key) == 0) gone.push_back(key);
  }
  for (const std::string& key : gone) Remove(key);
  {
    scd::MutexLock lock(&mu_);
    ++syncs_;
    watching_ = true;
  }
  const EtcdMetrics* m = options_.metrics;
  if (m != nullptr && m->watching != nullptr) {
    m->watching->Set(1);
    m->resyncs->Increment();
  }
  daemon::LogInfo("etcd_membership_synced", {{"prefix", watch_prefix_},
                                             {"revision", range.revision},
                                             {"decode_instances", present.size()}});
}

void EtcdDecodeMembership::OnEvents(const std::vector<EtcdEvent>& events) {
  for (const EtcdEvent& ev : events) {
    if (ev.type == EtcdEvent::Type::kDelete) {
      Remove(ev.key);
    } else if (!Apply(ev.key, ev.value, ev.revision)) {
      Remove(ev.key);  // an admitted key rewritten with something refused
    }
  }
}

bool EtcdDecodeMembership::Apply(const std::string& key, const std::string& value,
                                 int64_t revision) {
  absl::StatusOr<DecodeAnnouncement> a = ParseDecodeAnnouncement(value, options_.cluster_token);
  if (!a.ok()) {
    Reject(key, revision,
           a.status().code() == absl::StatusCode::kPermissionDenied ? "token" : "malformed",
           a.status(), ClaimedRpcAddress(value));
    return false;
  }
  if (key != EtcdDecodeKey(options_.prefix, a->info.model_name, a->info.instance_id)) {
    Reject(
        key, revision, "malformed",
        absl::InvalidArgumentError("the key does not name the announcement's model and instance"));
    return false;
  }
  auto it = admitted_.find(key);
  if (it == admitted_.end()) {
    absl::StatusOr<RegisterOutcome> r = registry_->Register(a->info, options_.cluster_token);
    if (!r.ok()) {
      Reject(key, revision, RegistryRefusalReason(r.status()), r.status(), a->info.rpc_address);
      return false;
    }
    admitted_[key] = a->info.instance_id;
    daemon::LogInfo("decode_joined", {{"instance_id", a->info.instance_id},
                                      {"model", a->info.model_name},
                                      {"rpc_address", a->info.rpc_address},
                                      {"registry", "etcd"}});
  }
  absl::StatusOr<bool> known =
      registry_->Heartbeat(a->info.instance_id, options_.cluster_token, a->load);
  if (known.ok() && !*known) {  // dropped meanwhile (a digest change): admit again
    admitted_.erase(key);
    return Apply(key, value, revision);
  }
  return true;
}

void EtcdDecodeMembership::Remove(const std::string& key) {
  auto it = admitted_.find(key);
  if (it == admitted_.end()) return;
  (void)registry_->Deregister(it->second, options_.cluster_token);
  daemon::LogInfo("decode_left", {{"instance_id", it->second}, {"registry", "etcd"}});
  admitted_.erase(it);
}

void EtcdDecodeMembership::Reject(const std::string& key, int64_t revision,
                                  const std::string& reason, const absl::Status& why,
                                  const std::string& rpc_address) {
  {
    scd::MutexLock lock(&mu_);
    auto [it, fresh] = rejected_revision_.emplace(key, revision);
    if (!fresh && it->second == revision) return;  // seen already (a resync)
    it->second = revision;
    ++rejected_[reason];
  }
  const EtcdMetrics* m = options_.metrics;
  if (m != nullptr && m->rejected != nullptr)
    m->rejected->WithLabels({reason}).value()->Increment();
  // etcd does not say who wrote the key: the address is the one the announcement claims.
  daemon::LogWarning("decode_announcement_rejected", {{"key", key},
                                                      {"rpc_address", rpc_address},
                                                      {"reason", reason},
                                                      {"message", std::string(why.message())}});
}

}  // namespace scd::rpc
