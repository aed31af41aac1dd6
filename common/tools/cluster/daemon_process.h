// DaemonProcess: runs one scd-prefill or scd-decode process for the benchmark and soak drivers
// and the integration tests: fork/exec with stderr — the daemon's JSON event log — to a
// file, waiting for a named start-up event to learn the ports it bound, signals, bounded
// waits. Nothing here blocks without a deadline.
#ifndef SCD_COMMON_TOOLS_CLUSTER_DAEMON_PROCESS_H_
#define SCD_COMMON_TOOLS_CLUSTER_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::cluster {

class DaemonProcess {
 public:
  // Starts `binary` with `args`; stderr goes to `log_path`, stdout to /dev/null. A non-empty
  // `netns` starts it inside that network namespace (/run/netns/<netns>, as `ip netns add`
  // makes them; the network-fault tests use this); a namespace it cannot enter makes the child
  // exit 127 with the reason in its log.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(const std::string& binary,
                                                              std::vector<std::string> args,
                                                              std::string log_path,
                                                              const std::string& netns = "");
  ~DaemonProcess();  // SIGKILL if still running

  // The first log line whose "event" is `event`; DeadlineExceeded after `timeout`, or
  // FailedPrecondition with the log's tail when the process exits first.
  absl::StatusOr<nlohmann::json> WaitForEvent(const std::string& event,
                                              std::chrono::milliseconds timeout);
  std::vector<nlohmann::json> LogLines() const;
  std::string LogText() const;
  std::string LogTail(size_t bytes = 2000) const;

  void Signal(int sig);
  // The exit code (-signal when killed), or nullopt when still running after `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code.
  std::optional<int> Stop(std::chrono::milliseconds timeout);
  bool running();
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }

 private:
  DaemonProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_;
  std::string log_path_;
  std::optional<int> exit_code_;
};

// A TCP port on 127.0.0.1 that was free a moment ago, chosen below the ephemeral port range
// (see daemon_process.cc for why).
absl::StatusOr<int> PickFreePort();

// Writes `config` as pretty JSON to `path`.
absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& config);

}  // namespace scd::cluster

#endif  // SCD_COMMON_TOOLS_CLUSTER_DAEMON_PROCESS_H_
