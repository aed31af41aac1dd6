// See prefill_config.h.
#include "prefill_server/prefill_config.h"

#include <array>
#include <string_view>

#include "common/config/config_paths.h"
#include "common/config/config_reader.h"
#include "common/config/cuda_kernel_keys.h"

namespace scd {

absl::StatusOr<PrefillDaemonConfig> PrefillConfigFromJson(const nlohmann::json& json,
                                                          const std::string& config_path) {
  config::ConfigReader r(json);
  PrefillDaemonConfig c;
  auto path = [&](config::ConfigReader& reader, std::string_view key) {
    return config::ResolveConfigPath(config_path, reader.String(key, ""));
  };
  c.base_model_path = path(r, "base_model");
  if (c.base_model_path.empty()) r.AddError("base_model", "is required (the base model's HF checkpoint directory)");
  c.backend = r.Enum("backend", "cpu", std::array<std::string_view, 2>{"cpu", "cuda"});
  config::ConfigReader kernels = r.Child("cuda_kernels");
  c.cuda_kernels = config::ReadCudaKernelOptions(kernels);

  config::ConfigReader http = r.Child("http");
  c.http_host = http.String("host", c.http_host);
  c.http_port = static_cast<int>(http.Int("port", c.http_port, 0, 65535));
  c.http_threads = static_cast<int>(http.Int("threads", c.http_threads, 2, 4096));
  c.api_key = http.String("api_key", "");

  config::ConfigReader limits = r.Child("limits");
  c.limits.max_body_bytes = static_cast<size_t>(limits.Int("max_body_bytes", 1 << 20, 1024, int64_t{1} << 30));
  c.limits.max_tokens = static_cast<int>(limits.Int("max_tokens", 4096, 1, 1 << 20));
  c.limits.default_max_tokens = static_cast<int>(limits.Int("default_max_tokens", 256, 1, 1 << 20));
  if (c.limits.default_max_tokens > c.limits.max_tokens) {
    limits.AddError("default_max_tokens", "must not exceed limits.max_tokens");
  }
  c.limits.max_prompt_bytes = static_cast<size_t>(limits.Int("max_prompt_bytes", 256 << 10, 1, int64_t{1} << 30));
  c.limits.max_messages = static_cast<size_t>(limits.Int("max_messages", 256, 1, 1 << 20));
  c.pipeline.request_timeout = absl::Seconds(limits.DurationSeconds("request_timeout", 300, 0.001, 86400));
  c.pipeline.producer_max_queue = static_cast<int>(limits.Int("prefill_queue", 64, 0, 1 << 20));

  config::ConfigReader grpc = r.Child("grpc");
  c.grpc_listen = grpc.String("listen", c.grpc_listen);
  config::ConfigReader tls = grpc.Child("tls");
  c.grpc_tls.cert = config::ResolveConfigPath(config_path, tls.String("cert", ""));
  c.grpc_tls.key = config::ResolveConfigPath(config_path, tls.String("key", ""));
  c.grpc_tls.ca_cert = config::ResolveConfigPath(config_path, tls.String("ca", ""));
  c.grpc_keepalive_time = absl::Seconds(grpc.DurationSeconds("keepalive_time", 10, 1, 86400));
  c.grpc_keepalive_timeout =
      absl::Seconds(grpc.DurationSeconds("keepalive_timeout", 10, 0.1, 3600));

  config::ConfigReader cp = r.Child("control_plane");
  c.cluster_token = cp.String("cluster_token", "");
  c.heartbeat_interval = absl::Seconds(cp.DurationSeconds("heartbeat_interval", 1, 0.01, 3600));
  c.lease = absl::Seconds(cp.DurationSeconds("lease", 5, 0.02, 36000));
  if (c.lease <= c.heartbeat_interval) cp.AddError("lease", "must exceed control_plane.heartbeat_interval");

  config::ConfigReader dp = r.Child("data_plane");
  c.data_plane_transport = dp.Enum("transport", "tcp", std::array<std::string_view, 2>{"tcp", "ucx"});
  c.bandwidth_gbps = dp.Double("bandwidth_gbps", 0, 0, 1e6);
  c.ucx_transports = dp.String("ucx_transports", "");
  c.pipeline.inline_max_bytes = static_cast<size_t>(dp.Int("inline_max_bytes", 0, 0, 32 << 20));
  c.data_plane_peer_timeout = absl::Seconds(dp.DurationSeconds("peer_timeout", 30, 1, 3600));
  config::ConfigReader dtls = dp.Child("decode_tls");
  c.pipeline.decode_channel.tls.cert = config::ResolveConfigPath(config_path, dtls.String("cert", ""));
  c.pipeline.decode_channel.tls.key = config::ResolveConfigPath(config_path, dtls.String("key", ""));
  c.pipeline.decode_channel.tls.ca_cert = config::ResolveConfigPath(config_path, dtls.String("ca", ""));

  config::ConfigReader pc = r.Child("prefix_cache");
  c.pipeline.prefix_cache = pc.Bool("enabled", true);
  c.prefix_cache_bytes = static_cast<size_t>(pc.Int("max_bytes", int64_t{256} << 20, 0, int64_t{1} << 40));
  c.prefix_block_tokens = static_cast<int>(pc.Int("block_tokens", 16, 0, 1 << 16));
  c.pipeline.max_consumer_suffix = static_cast<int>(pc.Int("max_consumer_suffix", 128, 1, 1 << 20));

  c.drain_timeout = absl::Seconds(r.DurationSeconds("drain_timeout", 30, 0, 3600));

  for (config::ConfigReader& s : r.ObjectList("specialists")) {
    SpecialistConfig sc;
    sc.name = s.RequiredString("name");
    sc.artifact_path = config::ResolveConfigPath(config_path, s.String("artifact", ""));
    sc.consumer_path = config::ResolveConfigPath(config_path, s.String("consumer_path", ""));
    sc.mode = s.Enum("mode", "scd",
                     std::array<std::string_view, 7>{"oracle", "raw", "quant8", "quant4",
                                                     "recompute", "scd-reuse", "scd"});
    sc.chat_template = s.Enum("chat_template", "plain",
                              std::array<std::string_view, 4>{"chatml", "llama2", "llama3", "plain"});
    sc.max_retries = static_cast<int>(s.Int("max_retries", 1, 0, 16));
    c.specialists.push_back(std::move(sc));
  }
  if (!r.Has("specialists")) r.AddError("specialists", "must list at least one specialist");
  if (absl::Status st = r.Finish(); !st.ok()) return st;
  return c;
}

}  // namespace scd
