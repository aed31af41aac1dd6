// What both daemon mains do before and after their daemon runs: parse `--config FILE` plus
// overrides, load the file, log the effective config (secrets redacted), and after start-up
// wait for SIGTERM/SIGINT. Exit codes: 0 after a clean drain, 1 when start-up fails, 2 for a
// wrong command line or config (the message names the key).
#ifndef SCD_COMMON_DAEMON_DAEMON_MAIN_H_
#define SCD_COMMON_DAEMON_DAEMON_MAIN_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace scd::daemon {

inline constexpr int kExitStartFailed = 1;
inline constexpr int kExitBadConfig = 2;

struct DaemonHooks {
  // Validates the merged config and starts the daemon; InvalidArgument means a config error.
  std::function<absl::Status(const nlohmann::json& config, const std::string& config_path)> start;
  // Drains and stops (after a shutdown signal).
  std::function<void()> stop;
};

// Runs a daemon main; returns the process exit code.
int RunDaemon(int argc, char** argv, const std::string& component, const DaemonHooks& hooks);

}  // namespace scd::daemon

#endif  // SCD_COMMON_DAEMON_DAEMON_MAIN_H_
