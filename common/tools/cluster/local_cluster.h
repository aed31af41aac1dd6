// Local cluster: what the benchmark and soak drivers need to bring up one prefill daemon and
// its decode daemons on this machine, shared so that every driver starts them the same way:
// the decode daemon's base config, a daemon started from a config written beside its log, the
// prefill daemon's start-up (its HTTP port comes from its "prefill_started" event), and the
// wait until the decode daemons have registered. Registration is read from the prefill
// daemon's own `scd_decode_instances` gauge, the figure the router routes by, so "ready" here
// means the prefill daemon can route to every decode daemon. Every wait has a deadline and
// fails early, with the log tail, when a daemon exits.
#ifndef SCD_COMMON_TOOLS_CLUSTER_LOCAL_CLUSTER_H_
#define SCD_COMMON_TOOLS_CLUSTER_LOCAL_CLUSTER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tools/cluster/daemon_process.h"
#include "nlohmann/json.hpp"

namespace scd::cluster {

// What a decode daemon serves and where it registers.
struct DecodeDaemonSpec {
  std::string model_name;  // the specialist's name, as the prefill daemon routes it
  std::string model_path;  // its checkpoint directory
  std::string artifact;    // the pair's calibration artifact
  std::string transport = "tcp";
  std::string control_plane;  // the prefill daemon's gRPC address
  std::string cluster_token;
  std::string drain_timeout = "10s";
  nlohmann::json extra = nlohmann::json::object();  // merged over the config (JSON merge patch)
};

// The decode daemon config for instance `index` ("decode-<index>"): gRPC and data plane on
// 127.0.0.1 with ports the kernel picks, registration retried for up to 120 s.
nlohmann::json DecodeDaemonJson(const DecodeDaemonSpec& spec, int index);

// Writes `config` to `dir`/`name`.json and starts `binary` on it; its log is `dir`/`name`.log.
// The daemons of a local cluster run on loopback with the drivers' fixed cluster tokens, which
// are no secrets: the written config sets control_plane.dev_insecure, without which a daemon
// refuses such a token (common/rpc/cluster_token.h).
absl::StatusOr<std::unique_ptr<DaemonProcess>> StartWithConfig(const std::string& binary,
                                                               const nlohmann::json& config,
                                                               const std::string& dir,
                                                               const std::string& name);

struct StartedPrefill {
  std::unique_ptr<DaemonProcess> process;
  int http_port = 0;
};

// Starts `bin_dir`/scd-prefill as StartWithConfig does and waits up to `timeout` for its
// "prefill_started" event.
absl::StatusOr<StartedPrefill> StartPrefillDaemon(const std::string& bin_dir,
                                                  const nlohmann::json& config,
                                                  const std::string& dir, const std::string& name,
                                                  std::chrono::milliseconds timeout);

// GET /metrics from a daemon's HTTP port on 127.0.0.1.
absl::StatusOr<std::string> ScrapeMetrics(int http_port);
// The sum of the samples of metric `name` (a series name: a histogram's `_sum`, say) whose
// labels include each of `labels` (`key="value"`); 0 when none.
double SumMetric(const std::string& exposition, const std::string& name,
                 const std::vector<std::string>& labels = {});

// The prefill daemon's `scd_decode_instances` gauge for `model`, read from its /metrics.
absl::StatusOr<int> LiveDecodeInstances(int http_port, const std::string& model);

// Waits until the prefill daemon at `http_port` counts every one of `decodes` as live for
// `model`. FailedPrecondition with the log tail as soon as a daemon exits; DeadlineExceeded
// after `timeout` with the last gauge reading, /ready and the prefill daemon's log tail.
absl::Status WaitForDecodeInstances(int http_port, const std::string& model, DaemonProcess& prefill,
                                    const std::vector<std::unique_ptr<DaemonProcess>>& decodes,
                                    std::chrono::milliseconds timeout);

// One prefill daemon and its decode daemons on this machine.
struct LocalPair {
  std::unique_ptr<DaemonProcess> prefill;
  int http_port = 0;
  std::string grpc_address;  // the prefill daemon's (control plane and Generation API)
  std::vector<std::unique_ptr<DaemonProcess>> decodes;
};

// Starts `bin_dir`/scd-prefill from `prefill_config` with grpc.listen on a free loopback port,
// then `decodes` decode daemons from `spec` (DecodeDaemonJson, control_plane that port), in
// `dir`, and waits up to 120 s each for the prefill daemon's start and every registration.
absl::StatusOr<LocalPair> StartLocalPair(const std::string& bin_dir, nlohmann::json prefill_config,
                                         DecodeDaemonSpec spec, int decodes,
                                         const std::string& dir);

}  // namespace scd::cluster

#endif  // SCD_COMMON_TOOLS_CLUSTER_LOCAL_CLUSTER_H_
