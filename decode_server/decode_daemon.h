// DecodeDaemon: one specialist (consumer) model behind the Decode gRPC service, fed by a
// data-plane listener, registered with the prefill daemon's control plane.
//
// Start-up order makes /ready honest: load the model and artifact (and check that the
// artifact was calibrated for this consumer), start the engine, bind the data plane and the
// gRPC server, and only then register, announcing the pair digest the prefill daemon checks
// (MakePairDigest of producer digest, consumer digest, artifact id). A refused registration
// (wrong pair, wrong token) is a start-up error with the control plane's reason; an
// unreachable control plane is retried in the background (ControlPlaneClient), and /ready says
// "not registered" meanwhile.
//
// Shutdown(drain): deregister first (no new routes), refuse new calls, let running requests
// finish up to `drain`, then stop everything; nothing in flight is dropped silently.
//
// Peers: the Decode service admits only callers with the cluster's client certificate (with
// grpc.tls.ca) and the cluster token; the data plane hands a payload only to the call naming
// its transfer token (decode_service.h, payload_mailbox.h). A daemon without a usable cluster
// token does not start unless control_plane.dev_insecure is set (rpc/cluster_token.h).
#ifndef SCD_DECODE_SERVER_DECODE_DAEMON_H_
#define SCD_DECODE_SERVER_DECODE_DAEMON_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/http/http_server.h"
#include "common/metrics/registry.h"
#include "common/rpc/control_plane_client.h"
#include "common/rpc/credentials.h"
#include "common/rpc/etcd_registry.h"
#include "common/rpc/grpc_server.h"
#include "common/rpc/peer_auth.h"
#include "common/rpc/registry_config.h"
#include "common/runtime/backend.h"
#include "common/scd/artifact.h"
#include "common/scd/codec.h"
#include "common/serving/decode_engine.h"
#include "common/tokenizer/tokenizer.h"
#include "common/transport/transport.h"
#include "decode_server/decode_metrics.h"
#include "decode_server/decode_service.h"
#include "decode_server/payload_mailbox.h"

namespace scd {

// The decode daemon's config (configs/decode-*.yaml, read by decode_config.h). Each component
// the daemon builds takes its own option struct, embedded here as the prefill daemon's config
// embeds its own; a key's default is the member's initial value in that struct, and its range
// is checked where decode_config.cc reads it (docs/CONFIG.md lists both).
struct DecodeDaemonConfig {
  // The specialist.
  std::string model_name;     // model.name, as clients name it
  std::string model_path;     // model.path: HF checkpoint directory
  std::string artifact_path;  // model.artifact (.scd.safetensors); empty: baselines only
  std::string producer_path;  // model.producer_path: base checkpoint, read for its digest
  std::string backend = "cpu";
  BackendOptions backend_options;  // cuda_graphs.*, cuda_kernels.*
  CodecOptions codec;              // gpu_rebuild
  std::string instance_id;         // empty: "<model>-<pid>-<random>"
  // quality.shadow_rate: the share of requests the shadow oracle samples (engine.shadow.rate,
  // which is off by default in the engine itself).
  double shadow_rate = 0.01;

  // gRPC Decode service: grpc.listen and grpc.keepalive_* (which the reader also sets on the
  // control-plane channel); the credentials are made from rpc_tls at start.
  rpc::GrpcServerOptions grpc;
  std::string rpc_advertise;  // what the prefill daemon dials; empty: the bound listen address
  rpc::TlsPaths rpc_tls;
  DecodeServiceOptions service;  // engine.max_tokens, engine.default_deadline, payload_wait

  // Data plane.
  std::string data_plane_transport = "tcp";       // tcp | ucx
  std::string data_plane_listen = "127.0.0.1:0";  // host:port (scheme added)
  std::string data_plane_advertise;  // host:port the prefill daemon dials; empty: the bound one
  transport::TransportOptions transport;  // ucx_transports, peer_timeout (= stall_timeout)
  PayloadMailboxOptions mailbox;          // max_pending_bytes, pending_ttl

  // Health and metrics over HTTP; port -1 turns it off.
  std::string http_host = "127.0.0.1";
  int http_port = -1;
  // http.header_timeout, body_timeout, write_timeout, max_connections_per_client.
  http::HttpServerOptions http_connections;

  // Control plane: target (control_plane.address), channel, cluster_token; the instance is
  // filled at start.
  rpc::ControlPlaneClientOptions control_plane;
  // Starts with an empty, example or short cluster token (rpc/cluster_token.h): development
  // clusters on a trusted network only.
  bool dev_insecure = false;
  absl::Duration register_wait = absl::Seconds(30);
  rpc::RegistryOptions registry;  // control_plane.registry and the etcd keys
  // With etcd: the lease of this daemon's key (it disappears this long after the daemon dies).
  absl::Duration lease = absl::Seconds(5);

  // Engine and limits: engine.* and, in engine.sekv, sekv.* (common/serving/sekv_session.h).
  DecodeEngineOptions engine;
  std::string sekv_router;  // calibrated router (.sekv.safetensors); empty: share threshold
  absl::Duration drain_timeout = absl::Seconds(30);
};

class DecodeDaemon {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeDaemon>> Create(DecodeDaemonConfig config);
  ~DecodeDaemon();  // Shutdown(zero)

  // Idempotent; see the file comment.
  void Shutdown(absl::Duration drain);

  const std::string& rpc_address() const { return rpc_address_; }
  const std::string& data_plane_address() const { return data_plane_address_; }
  int http_port() const { return http_ != nullptr ? http_->port() : -1; }
  const std::string& pair_digest_hex() const { return pair_digest_hex_; }
  const std::string& instance_id() const { return config_.instance_id; }
  bool registered() const;

 private:
  // What LoadPair gives StartEngine.
  struct LoadedPair {
    std::shared_ptr<const Model> model;
    std::shared_ptr<const ScdArtifact> artifact;  // null: baselines only
    std::string producer_digest;
  };

  explicit DecodeDaemon(DecodeDaemonConfig config) : config_(std::move(config)) {}
  // The start-up steps, in order (see the file comment).
  absl::Status Start();
  absl::StatusOr<LoadedPair> LoadPair();
  absl::Status StartEngine(const LoadedPair& pair);
  absl::Status StartDataPlane();
  absl::Status StartDecodeService();
  absl::Status StartHttp();
  absl::Status Register(absl::Status* register_error);
  // With etcd: writes P/decode/<model>/<instance> under a lease and keeps it alive.
  absl::Status Announce(const rpc::DecodeInstanceInfo& instance, absl::Status* register_error);
  // Where this daemon registers ("control plane at host:port", "etcd at ..."), and the last
  // registration error there.
  std::string RegistryName() const;
  absl::Status RegistrationError() const;
  int64_t Registrations() const;
  void StartTicker();
  void LogStarted(const absl::Status& register_error);

  DecodeDaemonConfig config_;
  std::string pair_digest_hex_;
  std::string rpc_address_;
  std::string data_plane_address_;
  std::string device_;   // the backend's device_description()
  std::string kernels_;  // and its kernel_description()

  metrics::Registry metrics_;
  std::unique_ptr<DecodeMetrics> state_metrics_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<DecodeEngine> engine_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Listener> listener_;
  std::unique_ptr<daemon::RefusalLog> payload_refusals_;  // scd_payload_rejected_total
  std::unique_ptr<PayloadMailbox> mailbox_;
  std::unique_ptr<rpc::PeerAuthenticator> auth_;       // the Decode service's callers
  std::unique_ptr<daemon::RefusalLog> call_refusals_;  // scd_decode_rejected_total
  std::unique_ptr<DecodeService> service_;
  rpc::GrpcServer grpc_;
  std::unique_ptr<http::HttpServer> http_;
  std::unique_ptr<rpc::ControlPlaneClient> control_;  // embedded registry
  std::unique_ptr<rpc::EtcdClient> etcd_;             // etcd registry, with:
  std::unique_ptr<rpc::EtcdMetrics> etcd_metrics_;
  std::unique_ptr<rpc::EtcdAnnouncer> announcer_;
  std::atomic<bool> was_registered_{false};
  // Samples state a scrape or an operator needs even while no heartbeat runs (the control
  // plane unreachable): registration (logged when it changes), load, pending payloads.
  std::thread ticker_;
  std::atomic<bool> stop_ticker_{false};
  bool shut_down_ = false;
};

}  // namespace scd

#endif  // SCD_DECODE_SERVER_DECODE_DAEMON_H_
