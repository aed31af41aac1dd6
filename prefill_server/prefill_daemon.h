// PrefillDaemon: the front door. It owns the base (producer) model and one Specialist per
// consumer it routes to, and hosts on one gRPC port the control plane (decode daemons
// register there) and the Generation API, and on one HTTP port the OpenAI-compatible API with
// /health, /ready and /metrics.
//
// /ready is 200 only when the models are loaded (they are, once Create returns) and every
// specialist has at least one live decode daemon; otherwise 503 naming the models without one.
// Shutdown(drain): /ready turns 503 and new requests are refused (503 / UNAVAILABLE), running
// requests get up to `drain` to finish, then the servers stop.
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
#include "common/rpc/grpc_server.h"
#include "common/runtime/backend.h"
#include "common/serving/prefix_cache.h"
#include "common/tokenizer/tokenizer.h"
#include "prefill_server/generation_pipeline.h"
#include "prefill_server/generation_service.h"
#include "prefill_server/openai_frontend.h"
#include "prefill_server/specialist.h"

namespace scd {

// Every key of the prefill daemon's config file (configs/prefill.yaml), read by
// prefill_config.h. A key's default is the initial value of its member here or in the option
// struct embedded for its component (limits, pipeline); its range is checked where
// prefill_config.cc reads it (docs/CONFIG.md lists both).
struct PrefillDaemonConfig {
  std::string base_model_path;
  std::string backend = "cpu";
  CudaKernelOptions cuda_kernels;  // cuda backend: the kernels where it has a choice

  std::string http_host = "127.0.0.1";
  int http_port = 8000;  // 0: any free port
  int http_threads = 64;
  std::string api_key;   // empty: no authentication
  http::RequestLimits limits;

  std::string grpc_listen = "127.0.0.1:7000";
  rpc::TlsPaths grpc_tls;
  // HTTP/2 keepalive on the gRPC server and on the channels to decode daemons.
  absl::Duration grpc_keepalive_time = absl::Seconds(10);
  absl::Duration grpc_keepalive_timeout = absl::Seconds(10);

  std::string cluster_token;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration lease = absl::Seconds(5);

  std::string data_plane_transport = "tcp";
  double bandwidth_gbps = 0;
  std::string ucx_transports;
  // A data-plane peer silent this long is gone (connect, stalled frame, missing ACK).
  absl::Duration data_plane_peer_timeout = absl::Seconds(30);

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
  absl::Status Ready();

  PrefillDaemonConfig config_;
  metrics::Registry metrics_;
  std::shared_ptr<const Model> base_;
  std::unique_ptr<Backend> producer_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::map<std::string, std::unique_ptr<Specialist>> specialists_;
  std::unique_ptr<rpc::DecodeRegistry> registry_;
  std::unique_ptr<rpc::ControlPlaneService> control_plane_;
  std::unique_ptr<PrefixCache> cache_;
  std::unique_ptr<GenerationPipeline> pipeline_;
  std::unique_ptr<GenerationService> generation_;
  rpc::GrpcServer grpc_;
  std::unique_ptr<http::HttpServer> http_;
  std::unique_ptr<OpenAiFrontend> openai_;

  std::atomic<bool> stop_ticker_{false};
  std::thread ticker_;  // refreshes gauges (decode instances, cache size)
  bool shut_down_ = false;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_PREFILL_DAEMON_H_
