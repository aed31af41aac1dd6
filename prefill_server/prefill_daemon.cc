// See prefill_daemon.h.
#include "prefill_server/prefill_daemon.h"

#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/daemon/event_log.h"
#include "common/model/weights.h"
#include "common/rpc/cluster_token.h"
#include "nlohmann/json.hpp"

namespace scd {
namespace {

// The API keys' names (never their secrets), for the start-up line.
std::vector<std::string> KeyNames(const PrefillDaemonConfig& c) {
  std::vector<std::string> names;
  if (!c.api_key.empty()) names.push_back(kDefaultApiKeyName);
  for (const ApiKeyConfig& k : c.api_keys) names.push_back(k.name);
  return names;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefillDaemon>> PrefillDaemon::Create(PrefillDaemonConfig config) {
  if (config.base_model_path.empty()) {
    return absl::InvalidArgumentError("config key 'base_model' is required");
  }
  if (config.specialists.empty()) {
    return absl::InvalidArgumentError("config key 'specialists' must list at least one specialist");
  }
  SCD_RETURN_IF_ERROR(rpc::CheckClusterToken(config.cluster_token, config.dev_insecure));
  if (config.dev_insecure && !rpc::CheckClusterToken(config.cluster_token, false).ok()) {
    daemon::LogWarning("dev_insecure", {{"message",
                                         "control_plane.dev_insecure: serving with a cluster "
                                         "token that is no secret; development only"}});
  }
  std::unique_ptr<PrefillDaemon> d(new PrefillDaemon(std::move(config)));
  if (absl::Status st = d->Start(); !st.ok()) {
    d->Shutdown(absl::ZeroDuration());
    return st;
  }
  return d;
}

std::map<std::string, std::string> PrefillDaemon::pair_digests() const {
  std::map<std::string, std::string> out;
  for (const auto& [name, s] : specialists_) out[name] = s->pair_digest_hex;
  return out;
}

absl::Status PrefillDaemon::LoadModels() {
  const PrefillDaemonConfig& c = config_;
  SCD_ASSIGN_OR_RETURN(base_, LoadModel(c.base_model_path));
  SCD_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::FromFile(c.base_model_path + "/tokenizer.json"));
  SCD_ASSIGN_OR_RETURN(BackendKind kind, ParseBackendKind(c.backend));
  BackendOptions backend_options;
  backend_options.cuda_kernels = c.cuda_kernels;
  backend_options.weights_dtype = c.weights_dtype;
  SCD_ASSIGN_OR_RETURN(producer_, CreateBackend(kind, base_, backend_options));
  for (const SpecialistConfig& sc : c.specialists) {
    if (specialists_.count(sc.name)) {
      return absl::InvalidArgumentError(absl::StrCat("specialist '", sc.name, "' is listed twice"));
    }
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Specialist> s, LoadSpecialist(sc, base_, *tokenizer_));
    if (s->costs != nullptr) {  // mode: auto
      s->costs->set_inline_max_bytes(static_cast<double>(c.pipeline.inline_max_bytes));
      SCD_RETURN_IF_ERROR(SeedCosts(*s, *producer_, c.transport.bandwidth_gbps));
    }
    daemon::LogInfo("specialist_loaded", {{"model", sc.name},
                                          {"mode", sc.mode},
                                          {"candidates", s->candidates.size()},
                                          {"pair_digest", s->pair_digest_hex},
                                          {"patch_layers", s->patch_layers}});
    specialists_[sc.name] = std::move(s);
  }
  std::vector<Specialist*> all;
  for (auto& [name, s] : specialists_) all.push_back(s.get());
  return ShareBases(all);
}

absl::Status PrefillDaemon::Start() {
  const PrefillDaemonConfig& c = config_;
  SCD_RETURN_IF_ERROR(LoadModels());
  const std::string device = producer_->device_description();
  std::vector<ApiKeyConfig> keys = c.api_keys;
  if (!c.api_key.empty()) keys.insert(keys.begin(), ApiKeyConfig{kDefaultApiKeyName, c.api_key});
  SCD_ASSIGN_OR_RETURN(keys_, ApiKeyRing::Create(std::move(keys), &metrics_));
  SCD_RETURN_IF_ERROR(StartPeerAuth());
  SCD_RETURN_IF_ERROR(StartRegistry());

  cache_ = std::make_unique<PrefixCache>(c.prefix_cache_bytes, c.prefix_block_tokens);
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<transport::Transport> transport,
                       transport::CreateTransport(c.data_plane_transport, c.transport));
  GenerationPipelineOptions po = c.pipeline;
  po.payload_block_tokens = c.prefix_block_tokens;
  po.decode_channel.keepalive_time = c.grpc_keepalive_time;
  po.decode_channel.keepalive_timeout = c.grpc_keepalive_timeout;
  if (!c.cluster_token.empty()) {  // decode daemons admit Decode calls that carry it
    po.decode_channel.call_metadata[rpc::kClusterTokenMetadata] = c.cluster_token;
  }
  auto sender = std::make_unique<PayloadSender>(std::move(transport), c.transport.peer_timeout);
  SCD_ASSIGN_OR_RETURN(admin_, AdminService::Create(sender.get(), c.transport.bandwidth_gbps,
                                                    auth_.get(), c.cluster_token, &metrics_));
  pipeline_ = std::make_unique<GenerationPipeline>(po, producer_.get(), tokenizer_.get(),
                                                   &specialists_, registry_.get(), cache_.get(),
                                                   std::move(sender), &metrics_);

  SCD_RETURN_IF_ERROR(StartGrpc());
  std::vector<std::string> names;
  for (const auto& [name, s] : specialists_) names.push_back(name);
  SCD_RETURN_IF_ERROR(StartHttp(names));

  StartGauges(device);
  SCD_RETURN_IF_ERROR(AnnounceSelf());
  daemon::LogInfo("prefill_started", {{"base_model", c.base_model_path},
                                      {"backend", c.backend},
                                      {"device", device},
                                      {"kernels", producer_->kernel_description()},
                                      {"http_port", http_->port()},
                                      {"grpc_address", grpc_.address},
                                      {"specialists", names},
                                      {"api_keys", KeyNames(c)}});
  return absl::OkStatus();
}

absl::Status PrefillDaemon::StartHttp(const std::vector<std::string>& names) {
  const PrefillDaemonConfig& c = config_;
  http::HttpServerOptions ho = c.http_connections;
  ho.host = c.http_host;
  ho.port = c.http_port;
  if (!keys_->empty()) {
    ho.authenticate = [this](const std::string& authorization) {
      return keys_->Valid(ApiKeyRing::BearerKey(authorization));
    };
  }
  ho.max_body_bytes = c.limits.max_body_bytes;
  ho.num_threads = c.http_threads;
  ho.metrics = &metrics_;
  ho.access_log = [](const http::AccessLogEntry& e) {
    daemon::LogInfo("http_access", {{"request_id", e.request_id},
                                    {"method", e.method},
                                    {"path", e.path},
                                    {"status", e.status},
                                    {"seconds", e.seconds}});
  };
  SCD_ASSIGN_OR_RETURN(http_, http::HttpServer::Create(ho));
  http_->AddHealthRoute();
  http_->AddReadyRoute([this] { return Ready(); });
  http_->AddMetricsRoute(&metrics_);
  openai_ =
      std::make_unique<OpenAiFrontend>(http_.get(), pipeline_.get(), keys_.get(), names, c.limits);
  return http_->Start();
}

absl::Status PrefillDaemon::StartGrpc() {
  const PrefillDaemonConfig& c = config_;
  generation_ = std::make_unique<GenerationService>(pipeline_.get(), keys_.get(), c.limits,
                                                    auth_.get(), generation_refusals_.get());
  rpc::GrpcServerOptions go;
  go.address = c.grpc_listen;
  go.keepalive_time = c.grpc_keepalive_time;
  go.keepalive_timeout = c.grpc_keepalive_timeout;
  go.credentials = auth_->credentials();
  std::vector<grpc::Service*> services = {generation_.get(), admin_.get()};
  if (control_plane_ != nullptr) services.push_back(control_plane_.get());  // embedded registry
  SCD_ASSIGN_OR_RETURN(grpc_, rpc::StartGrpcServer(go, services));
  return absl::OkStatus();
}

absl::Status PrefillDaemon::StartPeerAuth() {
  SCD_ASSIGN_OR_RETURN(auth_, rpc::PeerAuthenticator::Create(config_.grpc_tls));
  SCD_ASSIGN_OR_RETURN(
      metrics::CounterFamily * generation,
      metrics_.AddCounterFamily("scd_generation_rejected_total",
                                "Generation API calls refused for their client certificate "
                                "(mutual TLS), by reason: no_certificate, untrusted_certificate.",
                                {"reason"}));
  generation_refusals_ =
      std::make_unique<daemon::RefusalLog>("generation_call_refused", generation);
  if (config_.registry.etcd()) return absl::OkStatus();  // no control plane served here
  SCD_ASSIGN_OR_RETURN(metrics::CounterFamily * registry, rpc::AddRegistryRejected(&metrics_));
  registry_refusals_ = std::make_unique<daemon::RefusalLog>("control_plane_refused", registry);
  return absl::OkStatus();
}

absl::Status PrefillDaemon::StartRegistry() {
  const PrefillDaemonConfig& c = config_;
  rpc::DecodeRegistryOptions ro;
  ro.cluster_token = c.cluster_token;
  ro.heartbeat_interval = c.heartbeat_interval;
  ro.lease = c.lease;
  ro.expected_pair_digests = pair_digests();
  if (!c.registry.etcd()) {
    SCD_ASSIGN_OR_RETURN(registry_, rpc::DecodeRegistry::Create(ro));
    control_plane_ = std::make_unique<rpc::ControlPlaneService>(
        registry_.get(), rpc::ControlPlaneGuard{auth_.get(), registry_refusals_.get()});
    return absl::OkStatus();
  }
  // etcd owns liveness: an instance lives as long as its key (its lease). While etcd is
  // unreachable the registry keeps what it last saw; a failed call still quarantines.
  ro.lease = absl::InfiniteDuration();
  ro.failure_quarantine = c.lease;
  SCD_ASSIGN_OR_RETURN(registry_, rpc::DecodeRegistry::Create(ro));
  SCD_ASSIGN_OR_RETURN(rpc::EtcdOptions eo, c.registry.ToEtcdOptions());
  SCD_ASSIGN_OR_RETURN(etcd_, rpc::EtcdClient::Create(std::move(eo)));
  etcd_metrics_ = std::make_unique<rpc::EtcdMetrics>(&metrics_);
  rpc::EtcdMembershipOptions mo;
  mo.prefix = c.registry.etcd_prefix;
  mo.cluster_token = c.cluster_token;
  mo.metrics = etcd_metrics_.get();
  membership_ = std::make_unique<rpc::EtcdDecodeMembership>(etcd_.get(), registry_.get(), mo);
  membership_->Start();
  if (!membership_->WaitSynced(absl::Seconds(2))) {
    daemon::LogWarning("etcd_not_reached", {{"endpoints", c.registry.etcd_endpoints},
                                            {"message",
                                             "serving; the decode daemons will be "
                                             "routed to once etcd answers"}});
  }
  return absl::OkStatus();
}

absl::Status PrefillDaemon::AnnounceSelf() {
  const PrefillDaemonConfig& c = config_;
  if (!c.registry.etcd()) return absl::OkStatus();
  std::string id = c.instance_id;
  if (id.empty()) {
    std::random_device rd;
    id = absl::StrCat("prefill-", getpid(), "-", absl::Hex(rd() & 0xffffff));
  }
  std::vector<std::string> models;
  for (const auto& [name, s] : specialists_) models.push_back(name);
  const std::string value = nlohmann::json{
      {"instance_id", id},
      {"grpc_address", grpc_.address},
      {"http_address", absl::StrCat(c.http_host, ":", http_->port())},
      {"models", models}}.dump();
  rpc::EtcdAnnouncerOptions ao;
  ao.key = rpc::EtcdPrefillKey(c.registry.etcd_prefix, id);
  ao.value = [value] { return value; };
  ao.lease = c.lease;
  ao.refresh = c.lease / 3;
  ao.metrics = etcd_metrics_.get();
  SCD_ASSIGN_OR_RETURN(announcer_, rpc::EtcdAnnouncer::Create(etcd_.get(), ao));
  absl::Status st = announcer_->Start(absl::Seconds(2));
  if (st.code() == absl::StatusCode::kUnavailable) {
    daemon::LogWarning("etcd_not_reached", {{"endpoints", c.registry.etcd_endpoints},
                                            {"message", std::string(st.message())}});
    return absl::OkStatus();
  }
  return st;  // OK, or etcd refused this daemon's credentials: the daemon exits saying why
}

void PrefillDaemon::StartGauges(const std::string& device) {
  // What runs the base model, as an info series: value 1, the facts in its labels.
  metrics_
      .AddGaugeFamily("scd_prefill_backend_info",
                      "The backend running the base model and its device (value 1).",
                      {"backend", "device"})
      .value()
      ->WithLabels({config_.backend, device})
      .value()
      ->Set(1);
  // Gauges that describe state rather than events, refreshed once a second.
  auto* instances =
      metrics_
          .AddGaugeFamily("scd_decode_instances",
                          "Live, unquarantined decode daemons per specialist.", {"model"})
          .value();
  auto* cache_bytes =
      metrics_.AddGauge("scd_prefix_cache_bytes", "Bytes held by the shared-prefix cache.").value();
  auto* cache_entries =
      metrics_.AddGauge("scd_prefix_cache_entries", "Entries in the shared-prefix cache.").value();
  ticker_ = std::thread([this, instances, cache_bytes, cache_entries] {
    while (!stop_ticker_.load()) {
      for (const auto& [name, s] : specialists_) {
        instances->WithLabels({name}).value()->Set(registry_->LiveInstanceCount(name));
      }
      const PrefixCacheStats cs = cache_->stats();
      cache_bytes->Set(static_cast<double>(cs.bytes));
      cache_entries->Set(static_cast<double>(cs.entries));
      for (int i = 0; i < 10 && !stop_ticker_.load(); ++i) absl::SleepFor(absl::Milliseconds(100));
    }
  });
}

absl::Status PrefillDaemon::Ready() {
  // Ready with at least one compatible decode daemon known; the body names specialists
  // without one (their requests get 503 until one registers).
  std::string missing;
  bool any = false;
  for (const auto& [name, s] : specialists_) {
    if (registry_->LiveInstanceCount(name) > 0) {
      any = true;
    } else {
      absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
    }
  }
  if (!any)
    return absl::UnavailableError(absl::StrCat("no decode daemon registered for: ", missing));
  return absl::OkStatus();
}

void PrefillDaemon::Shutdown(absl::Duration drain) {
  if (shut_down_) return;
  shut_down_ = true;
  daemon::LogInfo("prefill_draining",
                  {{"in_flight", pipeline_ != nullptr ? pipeline_->in_flight() : 0}});
  if (announcer_ != nullptr) announcer_->Shutdown();
  if (generation_ != nullptr) generation_->StopAccepting();
  const auto drain_ms = std::chrono::milliseconds(absl::ToInt64Milliseconds(drain));
  if (http_ != nullptr) http_->Shutdown(drain_ms);  // refuses new requests, waits for streams
  if (openai_ != nullptr) openai_->WaitForWorkers(std::chrono::milliseconds(2000));
  const absl::Time until = absl::Now() + drain;
  while (pipeline_ != nullptr && pipeline_->in_flight() > 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (grpc_.server != nullptr) {
    grpc_.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  stop_ticker_.store(true);
  if (ticker_.joinable()) ticker_.join();
  if (membership_ != nullptr) membership_->Shutdown();
  openai_.reset();
  daemon::LogInfo("prefill_stopped", {});
}

PrefillDaemon::~PrefillDaemon() { Shutdown(absl::ZeroDuration()); }

}  // namespace scd
