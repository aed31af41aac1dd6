// See prefill_config.h. Each Read* below fills one part of PrefillDaemonConfig; the default of
// every key is the member's initial value (config::ReadInt and friends, option_keys.h), the
// range is written here once.
#include "prefill_server/prefill_config.h"

#include <algorithm>
#include <array>
#include <set>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/file_io.h"
#include "common/config/cuda_kernel_keys.h"
#include "common/config/http_keys.h"
#include "common/config/option_keys.h"
#include "common/config/weights_keys.h"
#include "common/rpc/registry_config.h"
#include "common/transport/bandwidth_limiter.h"

namespace scd {
namespace {

using config::ConfigReader;

// A key name as a metric label and log field wants it: short, and no character to escape.
bool ValidKeyName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char ch : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' &&
        ch != '.') {
      return false;
    }
  }
  return true;
}

// The secret of one http.api_keys[] entry: `key`, or the first line of `key_file`, read now so
// that a missing file stops start-up naming the key.
std::string ReadKeySecret(ConfigReader& k, const config::PathKeys& path) {
  std::string key = k.String("key", "");
  const std::string file = path(k, "key_file");
  if (key.empty() == file.empty()) {
    k.AddError("key", "give exactly one of key and key_file");
    return "";
  }
  if (file.empty()) return key;
  absl::StatusOr<std::string> text = ReadFileToString(file);
  if (!text.ok()) {
    k.AddError("key_file", std::string(text.status().message()));
    return "";
  }
  // A file written by `echo` or an editor ends with a newline that is no part of the key.
  key = std::string(absl::StripAsciiWhitespace(
      absl::string_view(*text).substr(0, std::min(text->size(), text->find('\n')))));
  if (key.empty()) k.AddError("key_file", absl::StrCat("'", file, "' holds no key"));
  return key;
}

// http.api_keys[]: the keys with their limits (prefill_server/api_keys.h).
void ReadApiKeys(ConfigReader& http, const config::PathKeys& path, PrefillDaemonConfig* c) {
  std::set<std::string> names = {kDefaultApiKeyName}, secrets = {c->api_key};
  for (ConfigReader& k : http.ObjectList("api_keys")) {
    ApiKeyConfig a;
    a.name = k.RequiredString("name");
    a.key = ReadKeySecret(k, path);
    config::ReadInt(k, "max_concurrent", &a.max_concurrent, 0, 1 << 20);
    config::ReadDouble(k, "requests_per_s", &a.requests_per_s, 0, 1e6);
    config::ReadInt(k, "burst", &a.burst, 0, 1 << 20);
    if (a.burst > 0 && a.requests_per_s == 0) k.AddError("burst", "needs requests_per_s");
    if (!a.name.empty() && !ValidKeyName(a.name)) {
      k.AddError("name", "must be 1 to 64 letters, digits, '-', '_' or '.'");
    } else if (!a.name.empty() && !names.insert(a.name).second) {
      k.AddError("name", absl::StrCat("'", a.name, "' is taken (\"", kDefaultApiKeyName,
                                      "\" is http.api_key's)"));
    }
    if (!a.key.empty() && !secrets.insert(a.key).second) {
      k.AddError("key", "the same secret as another key");
    }
    c->api_keys.push_back(std::move(a));
  }
}

void ReadHttp(ConfigReader& r, const config::PathKeys& path, PrefillDaemonConfig* c) {
  ConfigReader http = r.Child("http");
  config::ReadString(http, "host", &c->http_host);
  config::ReadInt(http, "port", &c->http_port, 0, 65535);
  config::ReadInt(http, "threads", &c->http_threads, 2, 4096);
  config::ReadString(http, "api_key", &c->api_key);
  ReadApiKeys(http, path, c);
  config::ReadHttpConnectionKeys(http, &c->http_connections);

  ConfigReader limits = r.Child("limits");
  http::RequestLimits& l = c->limits;
  config::ReadInt(limits, "max_body_bytes", &l.max_body_bytes, 1024, int64_t{1} << 30);
  config::ReadInt(limits, "max_tokens", &l.max_tokens, 1, 1 << 20);
  config::ReadInt(limits, "default_max_tokens", &l.default_max_tokens, 1, 1 << 20);
  if (l.default_max_tokens > l.max_tokens) {
    limits.AddError("default_max_tokens", "must not exceed limits.max_tokens");
  }
  config::ReadInt(limits, "max_prompt_bytes", &l.max_prompt_bytes, 1, int64_t{1} << 30);
  config::ReadInt(limits, "max_messages", &l.max_messages, 1, 1 << 20);
  config::ReadDuration(limits, "request_timeout", &c->pipeline.request_timeout, 0.001, 86400);
  config::ReadInt(limits, "prefill_queue", &c->pipeline.producer_max_queue, 0, 1 << 20);
  config::ReadDuration(limits, "max_queue_wait", &c->pipeline.max_queue_wait, 0, 3600);
  config::ReadInt(limits, "migration_limit", &c->pipeline.migration_limit, 0, 8);
}

void ReadGrpc(ConfigReader& r, const config::PathKeys& path, PrefillDaemonConfig* c) {
  ConfigReader grpc = r.Child("grpc");
  config::ReadString(grpc, "listen", &c->grpc_listen);
  ConfigReader tls = grpc.Child("tls");
  config::ReadTlsPaths(tls, path, &c->grpc_tls);
  config::ReadDuration(grpc, "keepalive_time", &c->grpc_keepalive_time, 1, 86400);
  config::ReadDuration(grpc, "keepalive_timeout", &c->grpc_keepalive_timeout, 0.1, 3600);

  ConfigReader cp = r.Child("control_plane");
  config::ReadString(cp, "cluster_token", &c->cluster_token);
  config::ReadBool(cp, "dev_insecure", &c->dev_insecure);
  config::ReadDuration(cp, "heartbeat_interval", &c->heartbeat_interval, 0.01, 3600);
  config::ReadDuration(cp, "lease", &c->lease, 0.02, 36000);
  if (c->lease <= c->heartbeat_interval) {
    cp.AddError("lease", "must exceed control_plane.heartbeat_interval");
  }
  rpc::ReadRegistryKeys(cp, path, &c->registry);
  if (c->registry.etcd() && c->lease < absl::Seconds(2)) {
    cp.AddError("lease", "must be at least 2s with registry etcd (etcd leases are whole seconds)");
  }
}

void ReadDataPlane(ConfigReader& r, const config::PathKeys& path, PrefillDaemonConfig* c) {
  ConfigReader dp = r.Child("data_plane");
  c->data_plane_transport =
      dp.Enum("transport", c->data_plane_transport, std::array<std::string_view, 2>{"tcp", "ucx"});
  config::ReadDouble(dp, "bandwidth_gbps", &c->transport.bandwidth_gbps, 0,
                     transport::kMaxBandwidthGbps);
  config::ReadString(dp, "ucx_transports", &c->transport.ucx_transports);
  config::ReadInt(dp, "inline_max_bytes", &c->pipeline.inline_max_bytes, 0, 32 << 20);
  config::ReadDuration(dp, "peer_timeout", &c->transport.peer_timeout, 1, 3600);
  c->transport.stall_timeout = c->transport.peer_timeout;
  ConfigReader dtls = dp.Child("decode_tls");
  config::ReadTlsPaths(dtls, path, &c->pipeline.decode_channel.tls);
  config::ReadString(dtls, "server_name", &c->pipeline.decode_channel.tls_server_name);

  ConfigReader pc = r.Child("prefix_cache");
  config::ReadBool(pc, "enabled", &c->pipeline.prefix_cache);
  config::ReadInt(pc, "max_bytes", &c->prefix_cache_bytes, 0, int64_t{1} << 40);
  config::ReadInt(pc, "block_tokens", &c->prefix_block_tokens, 0, 1 << 16);
  config::ReadInt(pc, "max_consumer_suffix", &c->pipeline.max_consumer_suffix, 1, 1 << 20);
}

void ReadSpecialists(ConfigReader& r, const config::PathKeys& path, PrefillDaemonConfig* c) {
  for (ConfigReader& s : r.ObjectList("specialists")) {
    SpecialistConfig sc;
    sc.name = s.RequiredString("name");
    sc.artifact_path = path(s, "artifact");
    sc.consumer_path = path(s, "consumer_path");
    sc.mode = s.Enum("mode", sc.mode,
                     std::array<std::string_view, 8>{"oracle", "raw", "quant8", "quant4",
                                                     "recompute", "scd-reuse", "scd", "auto"});
    config::ReadDouble(s, "quality_floor", &sc.quality_floor, 0, 1);
    sc.chat_template =
        s.Enum("chat_template", sc.chat_template,
               std::array<std::string_view, 4>{"chatml", "llama2", "llama3", "plain"});
    config::ReadInt(s, "max_retries", &sc.max_retries, 0, 16);
    sc.fallback =
        s.Enum("fallback", sc.fallback, std::array<std::string_view, 2>{"oracle", "fail"});
    c->specialists.push_back(std::move(sc));
  }
  if (!r.Has("specialists")) r.AddError("specialists", "must list at least one specialist");
}

// Reads every key into *c; the errors are the reader's (Finish).
void ReadPrefillConfig(ConfigReader& r, const std::string& config_path, PrefillDaemonConfig* c) {
  const config::PathKeys path(config_path);
  c->base_model_path = path(r, "base_model");
  config::ReadString(r, "instance_id", &c->instance_id);
  r.Require("base_model", "the base model's HF checkpoint directory");
  c->backend = r.Enum("backend", c->backend, std::array<std::string_view, 2>{"cpu", "cuda"});
  ConfigReader kernels = r.Child("cuda_kernels");
  c->cuda_kernels = config::ReadCudaKernelOptions(kernels);
  config::ReadWeightsKeys(r, &c->weights_dtype);
  ReadHttp(r, path, c);
  ReadGrpc(r, path, c);
  ReadDataPlane(r, path, c);
  config::ReadDuration(r, "drain_timeout", &c->drain_timeout, 0, 3600);
  ReadSpecialists(r, path, c);
}

}  // namespace

absl::StatusOr<PrefillDaemonConfig> PrefillConfigFromJson(const nlohmann::json& json,
                                                          const std::string& config_path) {
  ConfigReader r(json);
  PrefillDaemonConfig c;
  ReadPrefillConfig(r, config_path, &c);
  if (absl::Status st = r.Finish(); !st.ok()) return st;
  return c;
}

std::vector<config::ConfigKey> PrefillConfigKeys() {
  // One specialist and one API key, so that the keys of their lists are read too.
  const nlohmann::json probe = {
      {"specialists", nlohmann::json::array({nlohmann::json::object()})},
      {"http", {{"api_keys", nlohmann::json::array({nlohmann::json::object()})}}}};
  ConfigReader r(probe);
  PrefillDaemonConfig c;
  ReadPrefillConfig(r, "", &c);
  return r.keys();
}

}  // namespace scd
