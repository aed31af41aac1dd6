// The cluster registry on etcd (control_plane.registry: etcd), the alternative to the
// prefill daemon's embedded registry (control_plane_service.h) for many prefill daemons.
//
// Keys, under control_plane.etcd_prefix (P):
//   P/decode/<model>/<instance>  each decode daemon's announcement (JSON: what Register
//                                carries, plus its load), bound to its lease
//   P/prefill/<instance>         each prefill daemon's addresses, bound to its lease
// Every prefill daemon watches P/decode/ and feeds what it sees into its own DecodeRegistry,
// which routes exactly as with the embedded registry (least loaded, quarantine on failure).
//
// Admission holds as with Register: an announcement carries an HMAC-SHA256 of its identity
// fields keyed with the cluster token, and the registry checks the pair digest. A key that
// fails either is never routed to; it is logged once per revision and counted in
// scd_registry_rejected_total{reason}.
//
// Failures: a lease that lapses (daemon dead, or partitioned for longer than the lease)
// deletes the key and the watchers drop the instance. While etcd is unreachable every daemon
// keeps the membership it last saw (a failed call still quarantines an instance), retries
// with backoff, and when etcd answers again re-grants its lease and re-puts its key, and
// re-reads the prefix (dropping what vanished meanwhile) before watching again.
#ifndef SCD_COMMON_RPC_ETCD_REGISTRY_H_
#define SCD_COMMON_RPC_ETCD_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/mutex.h"
#include "common/metrics/registry.h"
#include "common/rpc/control_plane_client.h"
#include "common/rpc/decode_registry.h"
#include "common/rpc/etcd_client.h"

namespace scd::rpc {

std::string EtcdDecodePrefix(const std::string& prefix);  // P/decode/
std::string EtcdDecodeKey(const std::string& prefix, const std::string& model,
                          const std::string& instance_id);
std::string EtcdPrefillKey(const std::string& prefix, const std::string& instance_id);

// A decode daemon's announcement. The MAC covers the identity fields, not the load.
std::string EncodeDecodeAnnouncement(const DecodeInstanceInfo& info, const LoadReport& load,
                                     const std::string& cluster_token);
struct DecodeAnnouncement {
  DecodeInstanceInfo info;
  LoadReport load;
};
// InvalidArgument for malformed JSON or fields; PermissionDenied when the MAC does not match
// `cluster_token` (an empty token accepts any announcement: development only).
absl::StatusOr<DecodeAnnouncement> ParseDecodeAnnouncement(std::string_view value,
                                                           const std::string& cluster_token);

// The registration state every daemon exports in /metrics.
struct EtcdMetrics {
  // Null members when `registry` is null.
  explicit EtcdMetrics(metrics::Registry* registry);
  metrics::Gauge* registered = nullptr;        // scd_etcd_registered
  metrics::Counter* registrations = nullptr;   // scd_etcd_registrations_total
  metrics::Gauge* watching = nullptr;          // scd_etcd_watch_up
  metrics::Counter* resyncs = nullptr;         // scd_etcd_watch_syncs_total
  metrics::CounterFamily* rejected = nullptr;  // scd_registry_rejected_total{reason}
  metrics::Counter* errors = nullptr;          // scd_etcd_errors_total
};

struct EtcdAnnouncerOptions {
  std::string key;
  // The key's value, read at every refresh; a changed value is written again.
  std::function<std::string()> value;
  // The lease's TTL: the key disappears this long after the daemon stops renewing it.
  absl::Duration lease = absl::Seconds(5);
  // How often the lease is renewed and the value re-read; below lease / 2.
  absl::Duration refresh = absl::Seconds(1);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  const EtcdMetrics* metrics = nullptr;
};

// Keeps one key alive under a lease on a background thread (see the header comment).
class EtcdAnnouncer {
 public:
  // InvalidArgument for an empty key, no value function, a lease under 2 s, or a refresh not
  // below half the lease. `client` must outlive the announcer.
  static absl::StatusOr<std::unique_ptr<EtcdAnnouncer>> Create(EtcdClient* client,
                                                               EtcdAnnouncerOptions options);
  ~EtcdAnnouncer();
  EtcdAnnouncer(const EtcdAnnouncer&) = delete;
  EtcdAnnouncer& operator=(const EtcdAnnouncer&) = delete;

  // Starts the thread and waits up to `wait` for the first registration: OK once the key is
  // written; a refusal (PermissionDenied, Unauthenticated, InvalidArgument: wrong credentials
  // or key) at once; Unavailable when etcd did not answer in time (the thread keeps trying).
  absl::Status Start(absl::Duration wait);
  // Stops the thread and revokes the lease, which deletes the key. Idempotent.
  void Shutdown();

  bool registered();
  int64_t registrations();
  absl::Status last_error();

 private:
  EtcdAnnouncer(EtcdClient* client, EtcdAnnouncerOptions options)
      : client_(client), options_(std::move(options)) {}
  void Loop();
  // Grants a lease and writes the key.
  absl::Status Register();
  // Renews the lease and rewrites a changed value.
  absl::Status Refresh();
  bool SleepUnlessStopped(absl::Duration d);
  void SetRegistered(bool registered);
  void RecordError(const absl::Status& st);

  EtcdClient* const client_;
  const EtcdAnnouncerOptions options_;
  std::thread thread_;
  // The loop's own state.
  int64_t lease_id_ = 0;
  std::string written_;
  absl::Time last_renewed_;

  scd::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  bool refused_ ABSL_GUARDED_BY(mu_) = false;
  int64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t revoke_lease_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
};

struct EtcdMembershipOptions {
  std::string prefix = "/scd";
  std::string cluster_token;
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  const EtcdMetrics* metrics = nullptr;
};

// A prefill daemon's view of the decode daemons: watches P/decode/ and keeps `registry` in
// step with it (register, load updates, removal), on a background thread.
class EtcdDecodeMembership {
 public:
  // `client` and `registry` must outlive the membership.
  EtcdDecodeMembership(EtcdClient* client, DecodeRegistry* registry, EtcdMembershipOptions options);
  ~EtcdDecodeMembership();
  EtcdDecodeMembership(const EtcdDecodeMembership&) = delete;
  EtcdDecodeMembership& operator=(const EtcdDecodeMembership&) = delete;

  void Start();
  // Waits up to `wait` for the first full read of the prefix; false when it did not happen.
  bool WaitSynced(absl::Duration wait);
  void Shutdown();

  bool watching();
  int64_t syncs();
  // Announcements refused so far, by reason ("token", "digest", "model", "malformed").
  std::map<std::string, int64_t> rejected();

 private:
  void Loop();
  void OnSnapshot(const EtcdRange& range);
  void OnEvents(const std::vector<EtcdEvent>& events);
  // Admits or refreshes the instance behind `key`; false when refused.
  bool Apply(const std::string& key, const std::string& value, int64_t revision);
  void Remove(const std::string& key);
  // Logs (once per key and revision) and counts a refused announcement; `rpc_address` is the
  // one it claims, when it could be read.
  void Reject(const std::string& key, int64_t revision, const std::string& reason,
              const absl::Status& why, const std::string& rpc_address = "");
  bool SleepUnlessStopped(absl::Duration d);

  EtcdClient* const client_;
  DecodeRegistry* const registry_;
  const EtcdMembershipOptions options_;
  const std::string watch_prefix_;
  std::thread thread_;
  EtcdWatchCancel cancel_;
  std::map<std::string, std::string> admitted_;  // key → instance id (loop thread only)

  scd::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
  int64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> rejected_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> rejected_revision_ ABSL_GUARDED_BY(mu_);  // key → logged rev
};

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_ETCD_REGISTRY_H_
