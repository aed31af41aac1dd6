// EtcdCluster: Debian's etcd (3.4+) started on loopback with free ports, one or more members,
// for the cluster tests and benchmark. Members can be killed, stopped and restarted on their
// data directories, as an operator would. Every wait has a deadline.
#ifndef SCD_COMMON_TOOLS_CLUSTER_ETCD_CLUSTER_H_
#define SCD_COMMON_TOOLS_CLUSTER_ETCD_CLUSTER_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rpc/credentials.h"
#include "common/tools/cluster/daemon_process.h"

namespace scd::cluster {

struct EtcdClusterOptions {
  int members = 1;
  std::string dir;              // data directories and logs go under it
  std::string binary = "etcd";  // looked up on PATH
  // Raft timing: faster than etcd's defaults (100 / 1000 ms) so that a lost leader is
  // replaced within about a second on loopback.
  int heartbeat_ms = 50;
  int election_ms = 500;
  std::chrono::milliseconds start_timeout{30000};
  // TLS on the client port when server_tls.cert is set (https:// endpoints; with
  // server_tls.ca_cert, client certificates signed by it are required). client_tls is what
  // the cluster's own health probes present.
  rpc::TlsPaths server_tls;
  rpc::TlsPaths client_tls;
};

class EtcdCluster {
 public:
  // Whether the etcd binary is on PATH.
  static bool Available(const std::string& binary = "etcd");
  // Starts every member and waits until each answers a linearizable read.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(EtcdClusterOptions options);
  ~EtcdCluster();  // kills what still runs

  // "http://127.0.0.1:a,http://127.0.0.1:b,..." (control_plane.etcd_endpoints).
  std::string endpoints() const;
  std::string endpoint(int member) const { return members_[member].client_url; }
  int size() const { return static_cast<int>(members_.size()); }

  void Kill(int member);  // SIGKILL
  void Stop(int member);  // SIGTERM, then SIGKILL after 10 s
  // Starts a killed or stopped member again on its data directory (WaitHealthy tells when it
  // answers: a member alone has no quorum until enough others are back).
  absl::Status Restart(int member);
  bool running(int member);
  pid_t pid(int member) const;  // -1 when not started
  // Waits until every running member answers a linearizable read.
  absl::Status WaitHealthy(std::chrono::milliseconds timeout);

 private:
  struct Member {
    std::string name, client_url, peer_url, data_dir, log_path;
    std::unique_ptr<DaemonProcess> process;
  };
  explicit EtcdCluster(EtcdClusterOptions options) : options_(std::move(options)) {}
  absl::Status Launch(int member, bool existing);

  EtcdClusterOptions options_;
  std::string initial_cluster_;
  std::vector<Member> members_;
};

}  // namespace scd::cluster

#endif  // SCD_COMMON_TOOLS_CLUSTER_ETCD_CLUSTER_H_
