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
#include "common/rpc/grpc_server.h"
#include "common/runtime/backend.h"
#include "common/scd/artifact.h"
#include "common/serving/decode_engine.h"
#include "common/tokenizer/tokenizer.h"
#include "common/transport/transport.h"
#include "decode_server/decode_service.h"
#include "decode_server/payload_mailbox.h"

namespace scd {

// Every key of the decode daemon's config file (configs/decode-*.yaml); defaults in
// decode_config.cc and docs.
struct DecodeDaemonConfig {
  // The specialist.
  std::string model_name;     // as clients name it
  std::string model_path;     // HF checkpoint directory
  std::string artifact_path;  // calibration artifact (.scd.safetensors); empty: baselines only
  std::string producer_path;  // base checkpoint, only read for its digest when no artifact
  std::string backend = "cpu";
  bool gpu_rebuild = true;  // cuda backend: scd payloads rebuilt on the GPU (gpu_rebuild.h)
  bool cuda_graphs = true;  // cuda backend: decode steps replayed as CUDA graphs
  int cuda_graph_max_batch = 64;  // ... for batches up to this size
  CudaKernelOptions cuda_kernels;  // cuda backend: the kernels where it has a choice
  std::string instance_id;    // empty: "<model>-<pid>-<random>"

  // gRPC Decode service.
  std::string rpc_listen = "127.0.0.1:0";
  std::string rpc_advertise;  // what the prefill daemon dials; empty: the bound listen address
  rpc::TlsPaths rpc_tls;
  // HTTP/2 keepalive on the Decode service and on the control-plane channel.
  absl::Duration grpc_keepalive_time = absl::Seconds(10);
  absl::Duration grpc_keepalive_timeout = absl::Seconds(10);

  // Data plane.
  std::string data_plane_transport = "tcp";  // tcp | ucx
  std::string data_plane_listen = "127.0.0.1:0";  // host:port (scheme added)
  std::string data_plane_advertise;  // host:port the prefill daemon dials; empty: the bound one
  std::string ucx_transports;
  size_t mailbox_max_bytes = size_t{1} << 30;
  absl::Duration mailbox_ttl = absl::Seconds(60);
  absl::Duration data_plane_peer_timeout = absl::Seconds(30);  // a silent sender is gone

  // Health and metrics over HTTP; port -1 turns it off.
  std::string http_host = "127.0.0.1";
  int http_port = -1;

  // Control plane.
  std::string control_plane;  // the prefill daemon's "host:port"
  std::string cluster_token;
  rpc::ChannelOptions control_plane_channel;
  absl::Duration register_wait = absl::Seconds(30);

  // Engine and limits.
  int max_batch = 16;
  int max_queue = 256;
  absl::Duration min_step_interval = absl::ZeroDuration();
  int prefill_chunk = 2048;  // prompt tokens prefilled between decode steps (0: whole prompts)
  int rebuild_chunk = 8192;  // payload rows rebuilt between decode steps (0: whole payloads)
  int max_tokens = 4096;
  // Device memory for the admitted requests' KV caches (DecodeEngineOptions): 0 takes
  // kv_memory_fraction of the device's free memory at start (on the CPU backend, of the host's
  // available memory less the SEKV host budget).
  int64_t kv_budget_bytes = 0;
  double kv_memory_fraction = 0.9;
  absl::Duration default_deadline = absl::Minutes(5);
  absl::Duration payload_wait = absl::Seconds(5);
  absl::Duration drain_timeout = absl::Seconds(30);

  // SEKV (issue 6, common/serving/sekv_session.h): off by default. When on, every request is
  // served through a SEKV cache whose GPU tier is `sekv_budget` of its full KV cache.
  bool sekv_enabled = false;
  double sekv_budget = 0.4;
  // Host memory for SEKV prompts and hierarchies; 0: sekv_host_memory_fraction of the host's
  // available memory at start (0 too: no limit).
  int64_t sekv_max_host_bytes = 0;
  double sekv_host_memory_fraction = 0.5;
  int sekv_min_prompt_tokens = 0;   // shorter prompts take the plain path; 0: every prompt
  std::string sekv_router;  // calibrated router (.sekv.safetensors); empty: share-threshold gate
  bool sekv_gpu = true;     // on the CUDA backend, decode SEKV requests on the GPU (gpu_sekv.h)
  bool sekv_gpu_f32 = false;  // the GPU tier's rows in F32 (sekv.gpu_tier: f32) instead of BF16
  bool sekv_gpu_host_zoom = false;  // the GPU path's zoom-in on the host (sekv.gpu_zoom: host)
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
  bool registered() const { return control_ != nullptr && control_->registered(); }

 private:
  explicit DecodeDaemon(DecodeDaemonConfig config) : config_(std::move(config)) {}
  absl::Status Start();

  DecodeDaemonConfig config_;
  std::string pair_digest_hex_;
  std::string rpc_address_;
  std::string data_plane_address_;

  metrics::Registry metrics_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<DecodeEngine> engine_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::Listener> listener_;
  std::unique_ptr<PayloadMailbox> mailbox_;
  std::unique_ptr<DecodeService> service_;
  rpc::GrpcServer grpc_;
  std::unique_ptr<http::HttpServer> http_;
  std::unique_ptr<rpc::ControlPlaneClient> control_;
  std::atomic<bool> was_registered_{false};
  // Samples state a scrape or an operator needs even while no heartbeat runs (the control
  // plane unreachable): registration (logged when it changes), load, pending payloads.
  std::thread ticker_;
  std::atomic<bool> stop_ticker_{false};
  bool shut_down_ = false;
};

}  // namespace scd

#endif  // SCD_DECODE_SERVER_DECODE_DAEMON_H_
