// See decode_config.h.
#include "decode_server/decode_config.h"

#include <array>
#include <string_view>

#include "common/config/config_paths.h"
#include "common/config/config_reader.h"
#include "common/config/cuda_kernel_keys.h"

namespace scd {

absl::StatusOr<DecodeDaemonConfig> DecodeConfigFromJson(const nlohmann::json& json,
                                                        const std::string& config_path) {
  config::ConfigReader r(json);
  DecodeDaemonConfig c;
  auto path = [&](config::ConfigReader& reader, std::string_view key) {
    return config::ResolveConfigPath(config_path, reader.String(key, ""));
  };
  config::ConfigReader model = r.Child("model");
  c.model_name = model.RequiredString("name");
  c.model_path = path(model, "path");
  if (c.model_path.empty()) model.AddError("path", "is required (the specialist's HF checkpoint directory)");
  c.artifact_path = path(model, "artifact");
  c.producer_path = path(model, "producer_path");
  c.backend = r.Enum("backend", "cpu", std::array<std::string_view, 2>{"cpu", "cuda"});
  c.gpu_rebuild = r.Bool("gpu_rebuild", true);
  config::ConfigReader graphs = r.Child("cuda_graphs");
  c.cuda_graphs = graphs.Bool("enabled", true);
  c.cuda_graph_max_batch = static_cast<int>(graphs.Int("max_batch", 64, 1, 4096));
  config::ConfigReader kernels = r.Child("cuda_kernels");
  c.cuda_kernels = config::ReadCudaKernelOptions(kernels);
  c.instance_id = r.String("instance_id", "");

  config::ConfigReader grpc = r.Child("grpc");
  c.rpc_listen = grpc.String("listen", c.rpc_listen);
  c.rpc_advertise = grpc.String("advertise", "");
  config::ConfigReader tls = grpc.Child("tls");
  c.rpc_tls.cert = path(tls, "cert");
  c.rpc_tls.key = path(tls, "key");
  c.rpc_tls.ca_cert = path(tls, "ca");
  c.grpc_keepalive_time = absl::Seconds(grpc.DurationSeconds("keepalive_time", 10, 1, 86400));
  c.grpc_keepalive_timeout =
      absl::Seconds(grpc.DurationSeconds("keepalive_timeout", 10, 0.1, 3600));

  config::ConfigReader dp = r.Child("data_plane");
  c.data_plane_transport = dp.Enum("transport", "tcp", std::array<std::string_view, 2>{"tcp", "ucx"});
  c.data_plane_listen = dp.String("listen", c.data_plane_listen);
  c.data_plane_advertise = dp.String("advertise", "");
  if (c.data_plane_advertise.find("://") != std::string::npos) {
    dp.AddError("advertise", "is host:port (the transport's scheme is added)");
  }
  c.ucx_transports = dp.String("ucx_transports", "");
  c.mailbox_max_bytes = static_cast<size_t>(dp.Int("max_pending_bytes", int64_t{1} << 30, 1 << 20, int64_t{1} << 40));
  c.mailbox_ttl = absl::Seconds(dp.DurationSeconds("pending_ttl", 60, 0.1, 86400));
  c.payload_wait = absl::Seconds(dp.DurationSeconds("payload_wait", 5, 0.001, 3600));
  c.data_plane_peer_timeout = absl::Seconds(dp.DurationSeconds("peer_timeout", 30, 1, 3600));

  config::ConfigReader http = r.Child("http");
  c.http_host = http.String("host", c.http_host);
  c.http_port = static_cast<int>(http.Int("port", -1, -1, 65535));

  config::ConfigReader cp = r.Child("control_plane");
  c.control_plane = cp.RequiredString("address");
  c.cluster_token = cp.String("cluster_token", "");
  c.register_wait = absl::Seconds(cp.DurationSeconds("register_wait", 30, 0, 86400));
  config::ConfigReader ctls = cp.Child("tls");
  c.control_plane_channel.tls.cert = path(ctls, "cert");
  c.control_plane_channel.tls.key = path(ctls, "key");
  c.control_plane_channel.tls.ca_cert = path(ctls, "ca");
  c.control_plane_channel.tls_server_name = ctls.String("server_name", "");

  config::ConfigReader engine = r.Child("engine");
  c.max_batch = static_cast<int>(engine.Int("max_batch", 16, 1, 4096));
  c.max_queue = static_cast<int>(engine.Int("max_queue", 256, 0, 1 << 20));
  c.min_step_interval = absl::Seconds(engine.DurationSeconds("min_step_interval", 0, 0, 60));
  c.prefill_chunk = static_cast<int>(engine.Int("prefill_chunk", 2048, 0, 1 << 20));
  c.rebuild_chunk = static_cast<int>(engine.Int("rebuild_chunk", 8192, 0, 1 << 24));
  c.max_tokens = static_cast<int>(engine.Int("max_tokens", 4096, 1, 1 << 20));
  c.kv_budget_bytes = engine.Int("kv_budget_bytes", 0, 0, int64_t{1} << 50);
  c.kv_memory_fraction = engine.Double("kv_memory_fraction", 0.9, 0, 1);
  c.default_deadline = absl::Seconds(engine.DurationSeconds("default_deadline", 300, 0.001, 86400));
  c.drain_timeout = absl::Seconds(r.DurationSeconds("drain_timeout", 30, 0, 3600));

  config::ConfigReader sekv = r.Child("sekv");
  c.sekv_enabled = sekv.Bool("enabled", false);
  c.sekv_budget = sekv.Double("budget", 0.4, 0.01, 1.0);
  c.sekv_max_host_bytes = sekv.Int("max_host_bytes", 0, 0, int64_t{1} << 50);
  c.sekv_host_memory_fraction = sekv.Double("host_memory_fraction", 0.5, 0, 1);
  c.sekv_min_prompt_tokens = static_cast<int>(sekv.Int("min_prompt_tokens", 0, 0, 1 << 30));
  c.sekv_router = path(sekv, "router");
  c.sekv_gpu = sekv.Bool("gpu", true);
  c.sekv_gpu_f32 =
      sekv.Enum("gpu_tier", "bf16", std::array<std::string_view, 2>{"bf16", "f32"}) == "f32";
  c.sekv_gpu_host_zoom =
      sekv.Enum("gpu_zoom", "device", std::array<std::string_view, 2>{"device", "host"}) == "host";
  if (absl::Status st = r.Finish(); !st.ok()) return st;
  return c;
}

}  // namespace scd
