// ControlPlaneClient: a decode daemon's side of the control plane. It registers with the
// prefill daemon, keeps its lease alive with heartbeats on a background thread (reporting
// load each time), registers again whenever the server says it no longer knows the instance
// or a heartbeat fails (server restarted, network blip), and deregisters on shutdown.
//
// Retries use exponential backoff with jitter (initial_backoff doubling to max_backoff), so a
// restarting prefill daemon is not hammered by every decode daemon at once. Refusals
// (PERMISSION_DENIED, FAILED_PRECONDITION, NOT_FOUND, INVALID_ARGUMENT) are configuration
// errors: Start returns them so the daemon can exit with the reason; later in the
// background they are retried at max_backoff and kept in last_error().
#ifndef SCD_COMMON_RPC_CONTROL_PLANE_CLIENT_H_
#define SCD_COMMON_RPC_CONTROL_PLANE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/mutex.h"
#include "common/base/random.h"
#include "common/rpc/credentials.h"
#include "common/rpc/decode_registry.h"
#include "proto/scd.grpc.pb.h"

namespace scd::rpc {

struct ControlPlaneClientOptions {
  // The control plane's "host:port".
  std::string target;
  // TLS and reconnect settings for the channel.
  ChannelOptions channel;
  // This instance, as announced at Register.
  DecodeInstanceInfo instance;
  std::string cluster_token;
  // Sampled before every heartbeat (from the heartbeat thread); zeros when empty.
  std::function<LoadReport()> load_report;
  // Deadline of each RPC.
  absl::Duration rpc_timeout = absl::Seconds(2);
  // Retry backoff: doubles from initial_backoff up to max_backoff, with jitter.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
};

class ControlPlaneClient {
 public:
  // InvalidArgument for an empty target or non-positive durations; errors from MakeChannel
  // (TLS files). Does not contact the server.
  static absl::StatusOr<std::unique_ptr<ControlPlaneClient>> Create(
      ControlPlaneClientOptions options);

  ControlPlaneClient(const ControlPlaneClient&) = delete;
  ControlPlaneClient& operator=(const ControlPlaneClient&) = delete;
  // Shutdown().
  ~ControlPlaneClient();

  // Registers, retrying unreachable-server errors with backoff for up to `wait`, then starts
  // the heartbeat thread. Returns a refusal at once (see above). Unavailable naming the
  // target when the server was not reached within `wait`. Call once.
  absl::Status Start(absl::Duration wait);

  // Stops the heartbeat thread (interrupting a wait or an RPC in flight) and deregisters
  // when registered. Idempotent.
  void Shutdown();

  // Whether the last Register succeeded and no heartbeat has since said otherwise.
  bool registered();
  // Successful Register calls so far (1 after Start, more after re-registrations).
  int64_t registrations();
  // The most recent failure (OK when none since the last success).
  absl::Status last_error();
  // The interval the server asked for.
  absl::Duration heartbeat_interval();

 private:
  ControlPlaneClient(ControlPlaneClientOptions options, std::shared_ptr<grpc::Channel> channel);

  // One RPC each, with the options' deadline; the context is exposed to Shutdown for
  // cancellation while the call runs.
  absl::Status RegisterOnce();
  // True when the server asked for re-registration.
  absl::StatusOr<bool> HeartbeatOnce();
  void DeregisterOnce();

  void HeartbeatLoop();
  // Whether Shutdown was requested.
  bool stopping();
  // Sleeps up to `duration`; false when Shutdown was requested.
  bool SleepUnlessStopped(absl::Duration duration);
  absl::Duration NextBackoff();
  void ResetBackoff();
  void RecordError(const absl::Status& status);

  const ControlPlaneClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<scd::v1::ControlPlane::Stub> stub_;
  std::thread thread_;

  scd::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  int64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  grpc::ClientContext* active_context_ ABSL_GUARDED_BY(mu_) = nullptr;

  // Only the thread driving registration (Start's caller, then the heartbeat thread) uses
  // these.
  absl::Duration backoff_;
  SplitMix64 jitter_;
};

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_CONTROL_PLANE_CLIENT_H_
