// scd-decode --config FILE [--key=value ...]: one decode daemon (see decode_daemon.h).
#include <memory>

#include "common/daemon/daemon_main.h"
#include "decode_server/decode_config.h"
#include "decode_server/decode_daemon.h"

int main(int argc, char** argv) {
  std::unique_ptr<scd::DecodeDaemon> daemon;
  absl::Duration drain;
  scd::daemon::DaemonHooks hooks;
  hooks.start = [&](const nlohmann::json& json, const std::string& path) -> absl::Status {
    absl::StatusOr<scd::DecodeDaemonConfig> config = scd::DecodeConfigFromJson(json, path);
    if (!config.ok()) return config.status();
    drain = config->drain_timeout;
    absl::StatusOr<std::unique_ptr<scd::DecodeDaemon>> d =
        scd::DecodeDaemon::Create(std::move(*config));
    if (!d.ok()) return d.status();
    daemon = std::move(*d);
    return absl::OkStatus();
  };
  hooks.stop = [&] { daemon->Shutdown(drain); };
  return scd::daemon::RunDaemon(argc, argv, "decode", hooks);
}
