// See daemon_main.h.
#include "common/daemon/daemon_main.h"

#include <malloc.h>
#include <sys/resource.h>

#include <cstdio>

#include "common/config/daemon_config.h"
#include "common/config/effective_config.h"
#include "common/daemon/event_log.h"
#include "common/daemon/signals.h"

namespace scd::daemon {

int RunDaemon(int argc, char** argv, const std::string& component, const DaemonHooks& hooks) {
  // A request's buffers (rebuilt KV, activations, payload) are a few hundred KB each, above
  // glibc's default mmap threshold, so each was mapped and unmapped per request and RSS went
  // up and down with the number of requests in flight. A fixed 32 MiB threshold keeps them on
  // the heap, and a 256 MiB trim threshold keeps freed heap for the next request. RSS then
  // settles at the working set's high-water mark, and growth beyond it is a leak (the soak
  // run checks this). Both before any thread exists, so every arena gets them.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // Every client connection is a descriptor, and the HTTP front door holds thousands of idle
  // ones; the soft limit (often 1024) goes up to the hard one the operator allows.
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
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
    LogError("config_invalid",
             {{"config", cl->config_path}, {"error", std::string(cfg.status().message())}});
    return kExitBadConfig;
  }
  LogInfo("effective_config",
          {{"config", cl->config_path},
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
