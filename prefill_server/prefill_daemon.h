// PrefillDaemon: the front door. It owns the base (producer) model and one Specialist per
// consumer it routes to, and hosts on one gRPC port the Generation API, the Admin API
// (admin_service.h) and, with the embedded registry, the control plane (decode daemons
// register there); and on one HTTP port the
// OpenAI-compatible API with /health, /ready and /metrics. With control_plane.registry etcd
// it hosts no registry: it watches the decode daemons' keys in etcd and writes its own
// (common/rpc/etcd_registry.h), so any number of prefill daemons serve side by side.
//
// Peers: with grpc.tls.ca only callers with a certificate of that CA reach the control plane
// or the Generation API (per call, so that each refusal is logged and counted:
// common/rpc/peer_auth.h); Decode calls carry the cluster token, and each data-plane payload
// a random transfer token that its Decode call names. A daemon without a usable cluster token
// does not start unless control_plane.dev_insecure is set (rpc/cluster_token.h).
//
// /ready is 200 only when the models are loaded (they are, once Create returns) and at least
// one compatible decode daemon is known; otherwise 503. Shutdown(drain): /ready turns 503 and
// new requests are refused (503 / UNAVAILABLE), running requests get up to `drain` to finish,
// then the servers stop.
#ifndef SCD_PREFILL_SERVER_PREFILL_DAEMON_H_
#define SCD_PREFILL_SERVER_PREFILL_DAEMON_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/http/http_server.h"
#include "common/http/openai_api.h"
#include "common/metrics/registry.h"
#include "common/rpc/control_plane_service.h"
#include "common/rpc/credentials.h"
#include "common/rpc/decode_registry.h"
#include "common/rpc/etcd_registry.h"
#include "common/rpc/grpc_server.h"
#include "common/rpc/peer_auth.h"
#include "common/rpc/registry_config.h"
#include "common/runtime/backend.h"
#include "common/serving/prefix_cache.h"
#include "common/tokenizer/tokenizer.h"
#include "common/transport/transport.h"
#include "prefill_server/admin_service.h"
#include "prefill_server/api_keys.h"
#include "prefill_server/generation_pipeline.h"
#include "prefill_server/generation_service.h"
#include "prefill_server/openai_frontend.h"
#include "prefill_server/specialist.h"

namespace scd {

// Every key of the prefill daemon's config file (configs/prefill.yaml), read by
// prefill_config.h. A key's default is the initial value of its member here or in the option
// struct embedded for its component (limits, transport, pipeline); its range is checked where
// prefill_config.cc reads it (docs/CONFIG.md lists both).
struct PrefillDaemonConfig {
  std::string base_model_path;
  std::string backend = "cpu";
  CudaKernelOptions cuda_kernels;                 // cuda backend: the kernels where it has a choice
  WeightDtype weights_dtype = WeightDtype::kF32;  // weights.dtype (cpu backend)

  std::string http_host = "127.0.0.1";
  int http_port = 8000;  // 0: any free port
  int http_threads = 64;
  std::string api_key;  // one key without limits, named "default"; empty: none
  // http.api_keys[]: further keys, each with its limits (api_keys.h). With neither, no
  // authentication.
  std::vector<ApiKeyConfig> api_keys;
  // http.header_timeout, body_timeout, write_timeout, max_connections_per_client.
  http::HttpServerOptions http_connections;
  http::RequestLimits limits;

  std::string grpc_listen = "127.0.0.1:7000";
  rpc::TlsPaths grpc_tls;
  // HTTP/2 keepalive on the gRPC server and on the channels to decode daemons.
  absl::Duration grpc_keepalive_time = absl::Seconds(10);
  absl::Duration grpc_keepalive_timeout = absl::Seconds(10);

  std::string cluster_token;
  // Starts with an empty, example or short cluster token (rpc/cluster_token.h): development
  // clusters on a trusted network only.
  bool dev_insecure = false;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration lease = absl::Seconds(5);
  rpc::RegistryOptions registry;  // control_plane.registry and the etcd keys
  // This daemon's id in etcd (P/prefill/<id>); empty: prefill-<pid>-<random>.
  std::string instance_id;

  std::string data_plane_transport = "tcp";
  // The data plane's sender: bandwidth_gbps, ucx_transports, and peer_timeout (a peer silent
  // this long is gone: connect, stalled frame, missing ACK), the stall limit taking its value.
  transport::TransportOptions transport;

  size_t prefix_cache_bytes = size_t{256} << 20;
  int prefix_block_tokens = 16;

  GenerationPipelineOptions pipeline;
  std::vector<SpecialistConfig> specialists;
  absl::Duration drain_timeout = absl::Seconds(30);
};

class PrefillDaemon {
 public:
  static absl::StatusOr<std::unique_ptr<PrefillDaemon>> Create(PrefillDaemonConfig config);
  ~PrefillDaemon();

  void Shutdown(absl::Duration drain);

  int http_port() const { return http_ != nullptr ? http_->port() : -1; }
  const std::string& grpc_address() const { return grpc_.address; }
  rpc::DecodeRegistry& registry() { return *registry_; }
  // The expected pair digest per specialist.
  std::map<std::string, std::string> pair_digests() const;

 private:
  explicit PrefillDaemon(PrefillDaemonConfig config) : config_(std::move(config)) {}
  absl::Status Start();
  // The base model, its tokenizer and backend, and every specialist's pair.
  absl::Status LoadModels();
  // The HTTP server: probes, metrics and the OpenAI routes of `names`.
  absl::Status StartHttp(const std::vector<std::string>& names);
  // Who may call the gRPC services: the credentials and the logs of refused callers.
  absl::Status StartPeerAuth();
  // The Generation service and, with the embedded registry, the control plane, on one port.
  absl::Status StartGrpc();
  // The embedded registry and its ControlPlane service, or the etcd membership.
  absl::Status StartRegistry();
  // With etcd: this daemon's own key, P/prefill/<instance_id>.
  absl::Status AnnounceSelf();
  void StartGauges(const std::string& device);
  absl::Status Ready();

  PrefillDaemonConfig config_;
  metrics::Registry metrics_;
  // The API keys and their limits; declared early, so that it outlives every request's lease.
  std::unique_ptr<ApiKeyRing> keys_;
  std::shared_ptr<const Model> base_;
  std::unique_ptr<Backend> producer_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::map<std::string, std::unique_ptr<Specialist>> specialists_;
  std::unique_ptr<rpc::PeerAuthenticator> auth_;             // the gRPC callers' certificates
  std::unique_ptr<daemon::RefusalLog> registry_refusals_;    // scd_registry_rejected_total
  std::unique_ptr<daemon::RefusalLog> generation_refusals_;  // scd_generation_rejected_total
  std::unique_ptr<rpc::DecodeRegistry> registry_;
  std::unique_ptr<rpc::ControlPlaneService> control_plane_;  // embedded registry only
  std::unique_ptr<rpc::EtcdClient> etcd_;                    // etcd registry only, with:
  std::unique_ptr<rpc::EtcdMetrics> etcd_metrics_;
  std::unique_ptr<rpc::EtcdDecodeMembership> membership_;
  std::unique_ptr<rpc::EtcdAnnouncer> announcer_;
  std::unique_ptr<PrefixCache> cache_;
  std::unique_ptr<GenerationPipeline> pipeline_;
  std::unique_ptr<GenerationService> generation_;
  std::unique_ptr<AdminService> admin_;  // its PayloadSender is the pipeline's
  rpc::GrpcServer grpc_;
  std::unique_ptr<http::HttpServer> http_;
  std::unique_ptr<OpenAiFrontend> openai_;

  std::atomic<bool> stop_ticker_{false};
  std::thread ticker_;  // refreshes gauges (decode instances, cache size)
  bool shut_down_ = false;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_PREFILL_DAEMON_H_
