// scd-prefill --config FILE [--key=value ...]: the prefill daemon (see prefill_daemon.h).
#include <memory>

#include "common/daemon/daemon_main.h"
#include "prefill_server/prefill_config.h"
#include "prefill_server/prefill_daemon.h"

int main(int argc, char** argv) {
  std::unique_ptr<scd::PrefillDaemon> daemon;
  absl::Duration drain;
  scd::daemon::DaemonHooks hooks;
  hooks.start = [&](const nlohmann::json& json, const std::string& path) -> absl::Status {
    absl::StatusOr<scd::PrefillDaemonConfig> config = scd::PrefillConfigFromJson(json, path);
    if (!config.ok()) return config.status();
    drain = config->drain_timeout;
    absl::StatusOr<std::unique_ptr<scd::PrefillDaemon>> d =
        scd::PrefillDaemon::Create(std::move(*config));
    if (!d.ok()) return d.status();
    daemon = std::move(*d);
    return absl::OkStatus();
  };
  hooks.stop = [&] { daemon->Shutdown(drain); };
  return scd::daemon::RunDaemon(argc, argv, "prefill", hooks);
}
