// See daemon_main.h.
#include "common/daemon/daemon_main.h"

#include <cstdio>

#include "common/config/daemon_config.h"
#include "common/config/effective_config.h"
#include "common/daemon/event_log.h"
#include "common/daemon/signals.h"

namespace scd::daemon {

int RunDaemon(int argc, char** argv, const std::string& component, const DaemonHooks& hooks) {
  // Before any thread exists, so that every thread inherits the mask.
  BlockShutdownSignals();
  ConfigureEventLog(component);
  absl::StatusOr<config::DaemonCommandLine> cl = config::ParseDaemonCommandLine(argc, argv);
  if (!cl.ok()) {
    std::fprintf(stderr, "%s: %s\n%s", argv[0], std::string(cl.status().message()).c_str(),
                 config::DaemonUsage(argv[0]).c_str());
    return kExitBadConfig;
  }
  if (cl->help_requested) {
    std::printf("%s", config::DaemonUsage(argv[0]).c_str());
    return 0;
  }
  absl::StatusOr<nlohmann::json> cfg = config::LoadDaemonConfig(*cl);
  if (!cfg.ok()) {
    LogError("config_invalid", {{"config", cl->config_path}, {"error", std::string(cfg.status().message())}});
    return kExitBadConfig;
  }
  LogInfo("effective_config", {{"config", cl->config_path},
                               {"effective", nlohmann::json::parse(config::RenderEffectiveConfig(*cfg))}});
  absl::Status st = hooks.start(*cfg, cl->config_path);
  if (!st.ok()) {
    const bool config_error = st.code() == absl::StatusCode::kInvalidArgument;
    LogError(config_error ? "config_invalid" : "start_failed",
             {{"code", absl::StatusCodeToString(st.code())}, {"error", std::string(st.message())}});
    return config_error ? kExitBadConfig : kExitStartFailed;
  }
  int sig = 0;
  while ((sig = WaitForShutdownSignal(std::chrono::milliseconds(1000))) == 0) {
  }
  LogInfo("shutdown_signal", {{"signal", sig}});
  hooks.stop();
  return 0;
}

}  // namespace scd::daemon
