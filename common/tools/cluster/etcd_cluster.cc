// See etcd_cluster.h.
#include "common/tools/cluster/etcd_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/rpc/etcd_client.h"

namespace scd::cluster {
namespace {

std::string FindOnPath(const std::string& binary) {
  if (binary.find('/') != std::string::npos) return access(binary.c_str(), X_OK) == 0 ? binary : "";
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", binary);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A linearizable read through this member alone: it is up and the cluster has a leader.
absl::Status Probe(const std::string& url, const rpc::TlsPaths& tls) {
  rpc::EtcdOptions o;
  o.endpoints = {url};
  o.tls = tls;
  o.rpc_timeout = absl::Milliseconds(500);
  absl::StatusOr<std::unique_ptr<rpc::EtcdClient>> client = rpc::EtcdClient::Create(o);
  if (!client.ok()) return client.status();
  return (*client)->GetPrefix("/health-probe").status();
}

}  // namespace

bool EtcdCluster::Available(const std::string& binary) { return !FindOnPath(binary).empty(); }

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(EtcdClusterOptions options) {
  if (options.members < 1) return absl::InvalidArgumentError("an etcd cluster needs a member");
  if (FindOnPath(options.binary).empty()) {
    return absl::NotFoundError(absl::StrCat("'", options.binary,
                                            "' not found on PATH (Debian package etcd-server; "
                                            "scripts/setup.sh installs it)"));
  }
  std::unique_ptr<EtcdCluster> c(new EtcdCluster(options));
  std::vector<std::string> initial;
  for (int i = 0; i < options.members; ++i) {
    absl::StatusOr<int> client_port = PickFreePort();
    absl::StatusOr<int> peer_port = PickFreePort();
    if (!client_port.ok()) return client_port.status();
    if (!peer_port.ok()) return peer_port.status();
    Member m;
    m.name = absl::StrCat("member", i);
    m.client_url = absl::StrCat(options.server_tls.cert.empty() ? "http" : "https",
                                "://127.0.0.1:", *client_port);
    m.peer_url = absl::StrCat("http://127.0.0.1:", *peer_port);
    m.data_dir = absl::StrCat(options.dir, "/", m.name, ".etcd");
    m.log_path = absl::StrCat(options.dir, "/", m.name, ".log");
    initial.push_back(absl::StrCat(m.name, "=", m.peer_url));
    c->members_.push_back(std::move(m));
  }
  c->initial_cluster_ = absl::StrJoin(initial, ",");
  for (int i = 0; i < options.members; ++i) {
    if (absl::Status st = c->Launch(i, false); !st.ok()) return st;
  }
  if (absl::Status st = c->WaitHealthy(options.start_timeout); !st.ok()) return st;
  return c;
}

EtcdCluster::~EtcdCluster() {
  for (Member& m : members_) m.process.reset();  // SIGKILL
}

absl::Status EtcdCluster::Launch(int i, bool existing) {
  Member& m = members_[i];
  std::vector<std::string> args = {"--name",
                                   m.name,
                                   "--data-dir",
                                   m.data_dir,
                                   "--listen-client-urls",
                                   m.client_url,
                                   "--advertise-client-urls",
                                   m.client_url,
                                   "--listen-peer-urls",
                                   m.peer_url,
                                   "--initial-advertise-peer-urls",
                                   m.peer_url,
                                   "--initial-cluster",
                                   initial_cluster_,
                                   "--initial-cluster-state",
                                   existing ? "existing" : "new",
                                   "--initial-cluster-token",
                                   "scd-test-cluster",
                                   "--heartbeat-interval",
                                   std::to_string(options_.heartbeat_ms),
                                   "--election-timeout",
                                   std::to_string(options_.election_ms),
                                   "--logger",
                                   "zap",
                                   "--log-outputs",
                                   "stderr"};
  const rpc::TlsPaths& tls = options_.server_tls;
  if (!tls.cert.empty()) {
    args.insert(args.end(), {"--cert-file", tls.cert, "--key-file", tls.key});
    if (!tls.ca_cert.empty()) {
      args.insert(args.end(), {"--trusted-ca-file", tls.ca_cert, "--client-cert-auth"});
    }
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> p =
      DaemonProcess::Start(FindOnPath(options_.binary), args, m.log_path);
  if (!p.ok()) return p.status();
  m.process = std::move(*p);
  return absl::OkStatus();
}

std::string EtcdCluster::endpoints() const {
  std::vector<std::string> urls;
  for (const Member& m : members_) urls.push_back(m.client_url);
  return absl::StrJoin(urls, ",");
}

void EtcdCluster::Kill(int member) {
  if (members_[member].process != nullptr) {
    members_[member].process->Signal(SIGKILL);
    members_[member].process->Wait(std::chrono::seconds(10));
  }
}

void EtcdCluster::Stop(int member) {
  if (members_[member].process != nullptr) members_[member].process->Stop(std::chrono::seconds(10));
}

bool EtcdCluster::running(int member) {
  return members_[member].process != nullptr && members_[member].process->running();
}

pid_t EtcdCluster::pid(int member) const {
  return members_[member].process != nullptr ? members_[member].process->pid() : -1;
}

absl::Status EtcdCluster::Restart(int member) {
  if (running(member)) return absl::FailedPreconditionError("the member is running");
  return Launch(member, true);
}

absl::Status EtcdCluster::WaitHealthy(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    if (m.process == nullptr || !m.process->running()) continue;
    absl::Status st;
    while (!(st = Probe(m.client_url, options_.client_tls)).ok()) {
      if (!m.process->running()) {
        return absl::FailedPreconditionError(
            absl::StrCat("etcd ", m.name, " exited: ", m.process->LogTail(1500)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("etcd ", m.name, " at ", m.client_url, " did not answer: ", st.message()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling a deadline
    }
  }
  return absl::OkStatus();
}

}  // namespace scd::cluster
