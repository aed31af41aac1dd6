// What the deploy/ files mean to the daemons, for tests/deploy: a daemon command line taken
// from a unit, a Dockerfile ENTRYPOINT or a compose `command` is read by the daemons' own code
// (config::ParseDaemonCommandLine, config::LoadDaemonConfig, PrefillConfigFromJson,
// DecodeConfigFromJson), which rejects unknown flags and keys, so "the flag exists" is
// checked by the same code that would reject it at start-up. Secrets are replaced by
// placeholders made of digits only: a value that reached a daemon unquoted would be read as
// an integer and rejected, so the quoting in deploy/ is checked too.
#ifndef SCD_TESTS_DEPLOY_DEPLOY_MODEL_H_
#define SCD_TESTS_DEPLOY_DEPLOY_MODEL_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decode_server/decode_daemon.h"
#include "nlohmann/json.hpp"
#include "prefill_server/prefill_daemon.h"
#include "tests/deploy/deploy_files.h"

namespace scd::testing {

std::string SourcePath(const std::string& relative);  // under the repository root
std::string DeployPath(const std::string& relative);  // under deploy/
std::string BinPath(const std::string& name);         // under the build's bin/

// The variables deploy/scd.env.example defines, each mapped to its digits-only placeholder.
std::map<std::string, std::string> SecretPlaceholders();

// scripts/setup.sh's PACKAGES, in order.
std::vector<std::string> SetupPackages();

// Every deploy/configs/decode-NAME.yaml as NAME (the systemd instance name), sorted.
std::vector<std::string> DecodeInstances();

// One daemon start as the daemons themselves read it.
struct Launch {
  std::vector<std::string> argv;
  std::string binary;       // basename of argv[0]: scd-prefill or scd-decode
  std::string config_path;  // --config as the daemon sees it
  std::string config_file;  // the file on this machine that holds it
  std::optional<PrefillDaemonConfig> prefill;
  std::optional<DecodeDaemonConfig> decode;

  absl::Duration drain_timeout() const;
  std::string cluster_token() const;
  std::set<int> ports() const;                  // every port the daemon listens on
  int http_port() const;                        // -1 when off
  std::vector<std::string> read_paths() const;  // models, artifacts, TLS files it reads
};

// Maps the daemon's --config path to a file on this machine.
using ConfigLocator = std::function<absl::StatusOr<std::string>(const std::string&)>;
absl::StatusOr<Launch> ReadLaunch(const std::vector<std::string>& argv,
                                  const ConfigLocator& locate);

// A unit file of deploy/systemd and its ExecStart for one instance ("" for a plain unit).
struct UnitLaunch {
  std::string file;      // e.g. scd-decode@.service
  std::string instance;  // e.g. babi-qa
  SystemdUnit unit;
  Launch launch;
};
// The units' installed config directory and binary directory.
inline constexpr char kEtcDir[] = "/etc/scd";
// Both units, the decode template once per DecodeInstances() entry.
absl::StatusOr<std::vector<UnitLaunch>> ReadUnitLaunches();

// A Dockerfile of deploy/docker with what the tests look at.
struct DockerImage {
  std::string file;  // e.g. Dockerfile.prefill
  std::vector<DockerStage> stages;
  std::vector<std::string> entrypoint;              // exec form
  std::map<std::string, std::string> final_copies;  // final stage: destination -> source
  std::map<std::string, std::string> from_build;    // COPY --from: destination -> source
  std::string user;                                 // final stage USER
  std::set<int> exposed;
  std::vector<std::string> healthcheck;  // HEALTHCHECK CMD, exec form
  std::string stop_signal;
};
absl::StatusOr<DockerImage> ReadDockerImage(const std::string& path);

// The packages an `apt-get install` in `stage` installs (flags dropped), in order.
std::vector<std::string> AptPackages(const DockerStage& stage);

// True when `path` is `dir` or lies under it.
bool PathUnder(const std::string& path, const std::string& dir);

}  // namespace scd::testing

#endif  // SCD_TESTS_DEPLOY_DEPLOY_MODEL_H_
