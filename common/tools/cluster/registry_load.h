// The etcd registry at cluster scale, in one process against a loopback etcd: `decode`
// announcers (one per simulated decode daemon, each with its lease, keep-alive and load
// updates as scd-decode runs them) and `prefill` watchers (each a real EtcdDecodeMembership
// feeding its own DecodeRegistry, as scd-prefill runs it). It measures what a large cluster
// costs etcd and the daemons: the time until every watcher sees every announcer, the write
// and event rates in steady state, how late a load update reaches the watchers, and the CPU
// the etcd members spend. scd-registry-bench (scripts/bench) prints and saves it.
#ifndef SCD_COMMON_TOOLS_CLUSTER_REGISTRY_LOAD_H_
#define SCD_COMMON_TOOLS_CLUSTER_REGISTRY_LOAD_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace scd::cluster {

struct RegistryLoadOptions {
  int decode = 100;                           // announcers
  int prefill = 10;                           // watchers
  int members = 3;                            // etcd members
  absl::Duration lease = absl::Seconds(5);    // refresh = lease / 3, as the daemons use
  absl::Duration steady = absl::Seconds(20);  // the measured window
  std::string dir;                            // etcd data and logs
  std::function<void(const std::string&)> progress;
};

struct RegistryLoadResult {
  double join_all_s = 0;          // start of the announcers → every watcher sees every one
  double announcement_bytes = 0;  // mean value size
  double puts_per_s = 0;          // load updates written (all announcers)
  double keepalives_per_s = 0;    // lease renewals (all announcers)
  double events_per_s = 0;        // watch events delivered (all watchers)
  double update_latency_p50_ms = 0, update_latency_p99_ms = 0;  // write → every watcher
  double etcd_cpu_percent = 0;                                  // all members together, of one core
  double etcd_rss_mib = 0;                                      // all members together, at the end
  nlohmann::json ToJson(const RegistryLoadOptions& o) const;
};

absl::StatusOr<RegistryLoadResult> RunRegistryLoad(const RegistryLoadOptions& options);

}  // namespace scd::cluster

#endif  // SCD_COMMON_TOOLS_CLUSTER_REGISTRY_LOAD_H_
