// See decode_config.h. Each Read* below fills one component's options; the default of every
// key is the member's initial value (config::ReadInt and friends, option_keys.h), the range is
// written here once.
#include "decode_server/decode_config.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

#include "common/config/cuda_kernel_keys.h"
#include "common/config/http_keys.h"
#include "common/config/option_keys.h"
#include "common/config/weights_keys.h"
#include "common/rpc/registry_config.h"
#include "common/sekv/budget_plan.h"

namespace scd {
namespace {

using config::ConfigReader;

constexpr std::array<std::pair<std::string_view, sekv::GpuTier>, 2> kGpuTiers{
    {{"bf16", sekv::GpuTier::kBf16}, {"f32", sekv::GpuTier::kF32}}};
constexpr std::array<std::pair<std::string_view, sekv::GpuZoom>, 2> kGpuZooms{
    {{"device", sekv::GpuZoom::kDevice}, {"host", sekv::GpuZoom::kHost}}};

void ReadModel(ConfigReader& r, const config::PathKeys& path, DecodeDaemonConfig* c) {
  ConfigReader model = r.Child("model");
  c->model_name = model.RequiredString("name");
  c->service.model_name = c->model_name;
  c->model_path = path(model, "path");
  model.Require("path", "the specialist's HF checkpoint directory");
  c->artifact_path = path(model, "artifact");
  c->producer_path = path(model, "producer_path");
  c->backend = r.Enum("backend", c->backend, std::array<std::string_view, 2>{"cpu", "cuda"});
  config::ReadWeightsKeys(r, &c->backend_options.weights_dtype);
  config::ReadBool(r, "gpu_rebuild", &c->codec.gpu_rebuild);
  ConfigReader graphs = r.Child("cuda_graphs");
  config::ReadBool(graphs, "enabled", &c->backend_options.cuda_graphs);
  config::ReadInt(graphs, "max_batch", &c->backend_options.cuda_graph_max_batch, 1, 4096);
  ConfigReader kernels = r.Child("cuda_kernels");
  c->backend_options.cuda_kernels = config::ReadCudaKernelOptions(kernels);
  config::ReadString(r, "instance_id", &c->instance_id);
}

void ReadGrpc(ConfigReader& r, const config::PathKeys& path, DecodeDaemonConfig* c) {
  ConfigReader grpc = r.Child("grpc");
  config::ReadString(grpc, "listen", &c->grpc.address);
  config::ReadString(grpc, "advertise", &c->rpc_advertise);
  ConfigReader tls = grpc.Child("tls");
  config::ReadTlsPaths(tls, path, &c->rpc_tls);
  config::ReadDuration(grpc, "keepalive_time", &c->grpc.keepalive_time, 1, 86400);
  config::ReadDuration(grpc, "keepalive_timeout", &c->grpc.keepalive_timeout, 0.1, 3600);
  c->control_plane.channel.keepalive_time = c->grpc.keepalive_time;
  c->control_plane.channel.keepalive_timeout = c->grpc.keepalive_timeout;
}

void ReadDataPlane(ConfigReader& r, DecodeDaemonConfig* c) {
  ConfigReader dp = r.Child("data_plane");
  c->data_plane_transport =
      dp.Enum("transport", c->data_plane_transport, std::array<std::string_view, 2>{"tcp", "ucx"});
  config::ReadString(dp, "listen", &c->data_plane_listen);
  config::ReadString(dp, "advertise", &c->data_plane_advertise);
  if (c->data_plane_advertise.find("://") != std::string::npos) {
    dp.AddError("advertise", "is host:port (the transport's scheme is added)");
  }
  config::ReadString(dp, "ucx_transports", &c->transport.ucx_transports);
  config::ReadInt(dp, "max_pending_bytes", &c->mailbox.max_bytes, 1 << 20, int64_t{1} << 40);
  config::ReadDuration(dp, "pending_ttl", &c->mailbox.ttl, 0.1, 86400);
  config::ReadDuration(dp, "payload_wait", &c->service.payload_wait, 0.001, 3600);
  // A payload whose sender hung up is kept as long as its RPC may still wait for it.
  c->mailbox.orphan_ttl = std::min(c->service.payload_wait, c->mailbox.ttl);
  config::ReadDuration(dp, "peer_timeout", &c->transport.peer_timeout, 1, 3600);
  c->transport.stall_timeout = c->transport.peer_timeout;
}

void ReadControlPlane(ConfigReader& r, const config::PathKeys& path, DecodeDaemonConfig* c) {
  ConfigReader http = r.Child("http");
  config::ReadString(http, "host", &c->http_host);
  config::ReadInt(http, "port", &c->http_port, -1, 65535);
  config::ReadHttpConnectionKeys(http, &c->http_connections);

  ConfigReader cp = r.Child("control_plane");
  config::ReadString(cp, "address", &c->control_plane.target);
  config::ReadString(cp, "cluster_token", &c->control_plane.cluster_token);
  config::ReadBool(cp, "dev_insecure", &c->dev_insecure);
  config::ReadDuration(cp, "register_wait", &c->register_wait, 0, 86400);
  config::ReadDuration(cp, "lease", &c->lease, 2, 3600);
  rpc::ReadRegistryKeys(cp, path, &c->registry);
  if (!c->registry.etcd() && c->control_plane.target.empty()) {
    cp.AddError("address",
                "is required (the prefill daemon's gRPC host:port) unless registry is etcd");
  }
  ConfigReader tls = cp.Child("tls");
  config::ReadTlsPaths(tls, path, &c->control_plane.channel.tls);
  config::ReadString(tls, "server_name", &c->control_plane.channel.tls_server_name);
}

void ReadEngine(ConfigReader& r, DecodeDaemonConfig* c) {
  ConfigReader engine = r.Child("engine");
  DecodeEngineOptions& e = c->engine;
  config::ReadInt(engine, "max_batch", &e.max_batch, 1, 4096);
  config::ReadInt(engine, "max_queue", &e.max_queue, 0, 1 << 20);
  config::ReadDuration(engine, "min_step_interval", &e.min_step_interval, 0, 60);
  config::ReadInt(engine, "prefill_chunk", &e.prefill_chunk, 0, 1 << 20);
  config::ReadInt(engine, "rebuild_chunk", &e.rebuild_chunk, 0, 1 << 24);
  config::ReadInt(engine, "max_tokens", &c->service.max_tokens, 1, 1 << 20);
  config::ReadInt(engine, "kv_budget_bytes", &e.kv_budget_bytes, 0, int64_t{1} << 50);
  config::ReadDouble(engine, "kv_memory_fraction", &e.kv_memory_fraction, 0, 1);
  config::ReadDuration(engine, "default_deadline", &c->service.default_deadline, 0.001, 86400);
  config::ReadDuration(r, "drain_timeout", &c->drain_timeout, 0, 3600);
}

void ReadSekv(ConfigReader& r, const config::PathKeys& path, DecodeDaemonConfig* c) {
  ConfigReader keys = r.Child("sekv");
  SekvServingOptions& s = c->engine.sekv;
  config::ReadBool(keys, "enabled", &s.enabled);
  config::ReadDouble(keys, "budget", &s.budget, sekv::kMinBudget, sekv::kMaxBudget);
  config::ReadInt(keys, "max_host_bytes", &s.max_host_bytes, 0, int64_t{1} << 50);
  config::ReadDouble(keys, "host_memory_fraction", &s.host_memory_fraction, 0, 1);
  config::ReadInt(keys, "min_prompt_tokens", &s.min_prompt_tokens, 0, 1 << 30);
  c->sekv_router = path(keys, "router");
  config::ReadBool(keys, "gpu", &s.gpu);
  config::ReadEnum<sekv::GpuTier>(keys, "gpu_tier", &s.gpu_tier, kGpuTiers);
  config::ReadEnum<sekv::GpuZoom>(keys, "gpu_zoom", &s.gpu_zoom, kGpuZooms);
}

void ReadQuality(ConfigReader& r, DecodeDaemonConfig* c) {
  ConfigReader keys = r.Child("quality");
  ShadowOptions& s = c->engine.shadow;
  config::ReadDouble(keys, "shadow_rate", &c->shadow_rate, 0, 1);
  config::ReadDouble(keys, "shadow_max_tokens_per_s", &s.max_tokens_per_s, 1, 1e9);
  config::ReadInt(keys, "shadow_tokens", &s.tokens, 1, 4096);
  config::ReadInt(keys, "shadow_max_pending", &s.max_pending, 1, 1024);
  config::ReadInt(keys, "shadow_piece_tokens", &s.piece_tokens, 1, 1 << 20);
}

// Reads every key into *c; the errors are the reader's (Finish).
void ReadDecodeConfig(ConfigReader& r, const std::string& config_path, DecodeDaemonConfig* c) {
  const config::PathKeys path(config_path);
  ReadModel(r, path, c);
  ReadGrpc(r, path, c);
  ReadDataPlane(r, c);
  ReadControlPlane(r, path, c);
  ReadEngine(r, c);
  ReadSekv(r, path, c);
  ReadQuality(r, c);
}

}  // namespace

absl::StatusOr<DecodeDaemonConfig> DecodeConfigFromJson(const nlohmann::json& json,
                                                        const std::string& config_path) {
  ConfigReader r(json);
  DecodeDaemonConfig c;
  ReadDecodeConfig(r, config_path, &c);
  if (absl::Status st = r.Finish(); !st.ok()) return st;
  return c;
}

std::vector<ConfigWarning> QualityWarnings(const DecodeDaemonConfig& config) {
  std::vector<ConfigWarning> warnings;
  if (config.engine.sekv.enabled && config.sekv_router.empty()) {
    warnings.push_back(
        {"sekv.router",
         "SEKV is on without a calibrated router, so it expands the spans whose summary draws "
         "more than 5% of the attention: on held-back text (the bundled specialist, budget 0.4) "
         "its KL to the full KV cache is then 2.8 times the calibrated router's (0.0227 against "
         "0.0080) and worse than H2O's (0.0198); calibrate one with scd-sekv-calibrate"});
  }
  return warnings;
}

std::vector<config::ConfigKey> DecodeConfigKeys() {
  const nlohmann::json empty = nlohmann::json::object();
  ConfigReader r(empty);
  DecodeDaemonConfig c;
  ReadDecodeConfig(r, "", &c);
  return r.keys();
}

}  // namespace scd
