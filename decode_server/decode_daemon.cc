// See decode_daemon.h.
#include "decode_server/decode_daemon.h"

#include <unistd.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/daemon/event_log.h"
#include "common/model/weights.h"
#include "common/rpc/cluster_token.h"
#include "common/scd/shared_artifact.h"
#include "common/scd/wire_format.h"
#include "common/sekv/sekv_artifact.h"
#include "decode_server/decode_config.h"
#include "decode_server/shadow_metrics.h"

namespace scd {
namespace {

std::string RandomSuffix() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(static_cast<uint32_t>(rd()), absl::kZeroPad8));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeDaemon>> DecodeDaemon::Create(DecodeDaemonConfig config) {
  if (config.model_name.empty())
    return absl::InvalidArgumentError("config key 'model.name' is required");
  if (config.model_path.empty())
    return absl::InvalidArgumentError("config key 'model.path' is required");
  if (config.control_plane.target.empty() && !config.registry.etcd()) {
    return absl::InvalidArgumentError("config key 'control_plane.address' is required");
  }
  if (config.artifact_path.empty() && config.producer_path.empty()) {
    return absl::InvalidArgumentError(
        "config needs 'model.artifact' (the pair's calibration artifact) or "
        "'model.producer_path' (the base checkpoint, for the pair digest)");
  }
  SCD_RETURN_IF_ERROR(
      rpc::CheckClusterToken(config.control_plane.cluster_token, config.dev_insecure));
  const std::string& token = config.control_plane.cluster_token;
  if (config.dev_insecure && !rpc::CheckClusterToken(token, false).ok()) {
    daemon::LogWarning("dev_insecure", {{"message",
                                         "control_plane.dev_insecure: serving with a cluster "
                                         "token that is no secret; development only"}});
  }
  if (config.instance_id.empty()) {
    config.instance_id = absl::StrCat(config.model_name, "-", getpid(), "-", RandomSuffix());
  }
  std::unique_ptr<DecodeDaemon> d(new DecodeDaemon(std::move(config)));
  absl::Status st = d->Start();
  if (!st.ok()) {
    d->Shutdown(absl::ZeroDuration());
    return st;
  }
  return d;
}

absl::Status DecodeDaemon::Start() {
  for (const ConfigWarning& w : QualityWarnings(config_)) {
    daemon::LogWarning("config_below_measured_quality",
                       {{"key", w.key}, {"consequence", w.consequence}});
  }
  SCD_ASSIGN_OR_RETURN(LoadedPair pair, LoadPair());
  SCD_RETURN_IF_ERROR(StartEngine(pair));
  SCD_RETURN_IF_ERROR(StartDataPlane());
  SCD_RETURN_IF_ERROR(StartDecodeService());
  SCD_ASSIGN_OR_RETURN(state_metrics_, DecodeMetrics::Create(&metrics_, config_.backend, device_));
  state_metrics_->SetBudgets(engine_->stats());
  SCD_RETURN_IF_ERROR(StartHttp());
  absl::Status register_error;
  SCD_RETURN_IF_ERROR(Register(&register_error));
  StartTicker();
  LogStarted(register_error);
  return absl::OkStatus();
}

// The model, its tokenizer and artifact (checked to fit), and the pair identity.
absl::StatusOr<DecodeDaemon::LoadedPair> DecodeDaemon::LoadPair() {
  const DecodeDaemonConfig& c = config_;
  LoadedPair pair;
  SCD_ASSIGN_OR_RETURN(pair.model, LoadModel(c.model_path));
  SCD_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::FromFile(c.model_path + "/tokenizer.json"));
  if (!c.artifact_path.empty()) {
    // A shared artifact (several consumers on one basis) gives this model's section.
    SCD_ASSIGN_OR_RETURN(ScdArtifact a, LoadArtifactFor(c.artifact_path, pair.model->digest()));
    if (absl::Status st = a.CheckPair(nullptr, pair.model.get()); !st.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("artifact ", c.artifact_path,
                                                        " does not fit model ", c.model_path, ": ",
                                                        std::string(st.message())));
    }
    pair.producer_digest = a.producer_digest;
    pair.artifact = std::make_shared<const ScdArtifact>(std::move(a));
  } else {
    SCD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> producer, LoadModel(c.producer_path));
    pair.producer_digest = producer->digest();
  }
  pair_digest_hex_ =
      PairDigestHex(MakePairDigest(pair.producer_digest, pair.model->digest(),
                                   pair.artifact != nullptr ? pair.artifact->id : ""));
  return pair;
}

// The backend, the codec and, where SEKV is on, its router and cache metrics; then the engine.
absl::Status DecodeDaemon::StartEngine(const LoadedPair& pair) {
  const DecodeDaemonConfig& c = config_;
  SCD_ASSIGN_OR_RETURN(BackendKind kind, ParseBackendKind(c.backend));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                       CreateBackend(kind, pair.model, c.backend_options));
  device_ = backend->device_description();
  kernels_ = backend->kernel_description();
  SCD_ASSIGN_OR_RETURN(
      std::unique_ptr<ConsumerCodec> codec,
      ConsumerCodec::Create(pair.model, pair.producer_digest, pair.artifact, c.codec));
  DecodeEngineOptions eo = c.engine;
  eo.shadow.rate = c.shadow_rate;
  if (eo.shadow.rate > 0) {
    SCD_RETURN_IF_ERROR(AddShadowMetrics(
        &metrics_, c.model_name,
        pair.artifact != nullptr ? pair.artifact->quality : std::vector<QualityRecord>{},
        &eo.shadow));
  }
  if (eo.sekv.enabled) {
    if (!c.sekv_router.empty()) {
      SCD_ASSIGN_OR_RETURN(sekv::SekvArtifact a, sekv::SekvArtifact::Load(c.sekv_router));
      if (absl::Status st = a.CheckModel(*pair.model); !st.ok()) {
        return absl::FailedPreconditionError(absl::StrCat("sekv router ", c.sekv_router,
                                                          " does not fit model ", c.model_path,
                                                          ": ", std::string(st.message())));
      }
      eo.sekv.router = std::make_shared<const sekv::ZoomRouter>(std::move(a.router));
    }
    SCD_RETURN_IF_ERROR(AddSekvCacheMetrics(&metrics_, &eo.sekv));
  }
  SCD_ASSIGN_OR_RETURN(engine_, DecodeEngine::Create(std::move(backend), std::move(codec), eo));
  return absl::OkStatus();
}

// The data-plane listener and the mailbox that holds payloads until their RPC comes.
absl::Status DecodeDaemon::StartDataPlane() {
  const DecodeDaemonConfig& c = config_;
  SCD_ASSIGN_OR_RETURN(transport_, transport::CreateTransport(c.data_plane_transport, c.transport));
  SCD_ASSIGN_OR_RETURN(listener_, transport_->Listen(absl::StrCat(c.data_plane_transport, "://",
                                                                  c.data_plane_listen)));
  // A wildcard listen address (0.0.0.0) cannot be dialled from another host or container.
  data_plane_address_ = c.data_plane_advertise.empty()
                            ? listener_->address()
                            : absl::StrCat(c.data_plane_transport, "://", c.data_plane_advertise);
  SCD_ASSIGN_OR_RETURN(
      metrics::CounterFamily * refused,
      metrics_.AddCounterFamily("scd_payload_rejected_total",
                                "Data-plane payloads refused, by reason: no_token (the sender "
                                "is no authenticated prefill daemon), token_mismatch (not the "
                                "token its Decode call names).",
                                {"reason"}));
  payload_refusals_ = std::make_unique<daemon::RefusalLog>("payload_refused", refused);
  mailbox_ = std::make_unique<PayloadMailbox>(listener_.get(), c.mailbox, payload_refusals_.get());
  return absl::OkStatus();
}

// The gRPC Decode service.
absl::Status DecodeDaemon::StartDecodeService() {
  const DecodeDaemonConfig& c = config_;
  SCD_ASSIGN_OR_RETURN(auth_, rpc::PeerAuthenticator::Create(c.rpc_tls));
  SCD_ASSIGN_OR_RETURN(
      metrics::CounterFamily * refused,
      metrics_.AddCounterFamily("scd_decode_rejected_total",
                                "Decode calls refused before they were read, by reason: "
                                "no_certificate, untrusted_certificate (mutual TLS), token.",
                                {"reason"}));
  call_refusals_ = std::make_unique<daemon::RefusalLog>("decode_call_refused", refused);
  DecodeServiceGuard guard{auth_.get(), c.control_plane.cluster_token, call_refusals_.get()};
  service_ = std::make_unique<DecodeService>(engine_.get(), mailbox_.get(), tokenizer_.get(),
                                             c.service, &metrics_, std::move(guard));
  rpc::GrpcServerOptions go = c.grpc;
  go.credentials = auth_->credentials();
  SCD_ASSIGN_OR_RETURN(grpc_, rpc::StartGrpcServer(go, {service_.get()}));
  rpc_address_ = c.rpc_advertise.empty() ? grpc_.address : c.rpc_advertise;
  return absl::OkStatus();
}

// Health, readiness (registered) and metrics over HTTP, unless http.port is -1.
absl::Status DecodeDaemon::StartHttp() {
  const DecodeDaemonConfig& c = config_;
  if (c.http_port < 0) return absl::OkStatus();
  http::HttpServerOptions ho = c.http_connections;
  ho.host = c.http_host;
  ho.port = c.http_port;
  ho.metrics = &metrics_;
  SCD_ASSIGN_OR_RETURN(http_, http::HttpServer::Create(ho));
  http_->AddHealthRoute();
  http_->AddReadyRoute([this]() -> absl::Status {
    if (!registered()) {
      absl::Status last = RegistrationError();
      return absl::UnavailableError(
          absl::StrCat("not registered with the ", RegistryName(),
                       last.ok() ? "" : absl::StrCat(": ", std::string(last.message()))));
    }
    return absl::OkStatus();
  });
  http_->AddMetricsRoute(&metrics_);
  return http_->Start();
}

// Registers last: from here on the prefill daemon may route requests here. A refusal is an
// error; an unreachable control plane is retried in the background (*register_error says why).
absl::Status DecodeDaemon::Register(absl::Status* register_error) {
  const DecodeDaemonConfig& c = config_;
  rpc::ControlPlaneClientOptions co = c.control_plane;
  co.instance.instance_id = c.instance_id;
  co.instance.model_name = c.model_name;
  co.instance.pair_digest = pair_digest_hex_;
  co.instance.capacity = c.engine.max_batch + c.engine.max_queue;
  co.instance.data_plane_address = data_plane_address_;
  co.instance.rpc_address = rpc_address_;
  if (c.registry.etcd()) return Announce(co.instance, register_error);
  co.load_report = [this, max_batch = c.engine.max_batch]() {
    rpc::LoadReport r;
    r.active_requests = engine_->running();
    r.queue_depth = engine_->queued();
    r.batch_slots = max_batch;
    r.rates = service_->rates();
    return r;
  };
  SCD_ASSIGN_OR_RETURN(control_, rpc::ControlPlaneClient::Create(co));
  absl::Status st = control_->Start(c.register_wait);
  if (!st.ok() && st.code() != absl::StatusCode::kUnavailable) {
    return absl::Status(st.code(),
                        absl::StrCat("registration refused by the control plane at ",
                                     c.control_plane.target, ": ", std::string(st.message())));
  }
  *register_error = st;
  state_metrics_->SetRegistered(control_->registered());
  was_registered_.store(control_->registered());
  return absl::OkStatus();
}

absl::Status DecodeDaemon::Announce(const rpc::DecodeInstanceInfo& instance,
                                    absl::Status* register_error) {
  const DecodeDaemonConfig& c = config_;
  SCD_ASSIGN_OR_RETURN(rpc::EtcdOptions eo, c.registry.ToEtcdOptions());
  SCD_ASSIGN_OR_RETURN(etcd_, rpc::EtcdClient::Create(std::move(eo)));
  etcd_metrics_ = std::make_unique<rpc::EtcdMetrics>(&metrics_);
  rpc::EtcdAnnouncerOptions ao;
  ao.key = rpc::EtcdDecodeKey(c.registry.etcd_prefix, c.model_name, c.instance_id);
  ao.value = [this, instance, token = c.control_plane.cluster_token,
              max_batch = c.engine.max_batch]() {
    rpc::LoadReport load;
    load.active_requests = engine_->running();
    load.queue_depth = engine_->queued();
    load.batch_slots = max_batch;
    load.rates = service_->rates();
    return rpc::EncodeDecodeAnnouncement(instance, load, token);
  };
  ao.lease = c.lease;
  ao.refresh = c.lease / 3;
  ao.metrics = etcd_metrics_.get();
  SCD_ASSIGN_OR_RETURN(announcer_, rpc::EtcdAnnouncer::Create(etcd_.get(), ao));
  // Unlike the embedded registry, an unreachable etcd does not stop the daemon: it keeps
  // trying, and joins the prefill daemons' membership once etcd answers.
  absl::Status st = announcer_->Start(c.register_wait);
  if (!st.ok() && st.code() != absl::StatusCode::kUnavailable) {
    return absl::Status(st.code(), absl::StrCat("etcd refused this daemon's registration: ",
                                                std::string(st.message())));
  }
  *register_error = st;
  state_metrics_->SetRegistered(announcer_->registered());
  was_registered_.store(announcer_->registered());
  return absl::OkStatus();
}

bool DecodeDaemon::registered() const {
  if (announcer_ != nullptr) return announcer_->registered();
  return control_ != nullptr && control_->registered();
}

std::string DecodeDaemon::RegistryName() const {
  if (config_.registry.etcd()) return absl::StrCat("etcd at ", config_.registry.etcd_endpoints);
  return absl::StrCat("control plane at ", config_.control_plane.target);
}

absl::Status DecodeDaemon::RegistrationError() const {
  if (announcer_ != nullptr) return announcer_->last_error();
  return control_ != nullptr ? control_->last_error() : absl::OkStatus();
}

int64_t DecodeDaemon::Registrations() const {
  if (announcer_ != nullptr) return announcer_->registrations();
  return control_ != nullptr ? control_->registrations() : 0;
}

// State gauges and registration changes, sampled every 100 ms rather than from the heartbeat:
// while the control plane is unreachable no heartbeat runs, and the loss itself is what must
// show up.
void DecodeDaemon::StartTicker() {
  ticker_ = std::thread([this] {
    while (!stop_ticker_.load()) {
      state_metrics_->Sample(*engine_, mailbox_->stats());
      state_metrics_->SetStageRates(service_->rates());
      const bool now_registered = registered();
      state_metrics_->SetRegistered(now_registered);
      if (now_registered != was_registered_.exchange(now_registered)) {
        // Registration changes are rare and operationally interesting (prefill restarts,
        // network loss), so each is one log line.
        const absl::Status error = RegistrationError();
        daemon::LogInfo(now_registered ? "registered" : "registration_lost",
                        {{"instance_id", config_.instance_id},
                         {"registry", RegistryName()},
                         {"registrations", Registrations()},
                         {"last_error", std::string(error.message())}});
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
}

void DecodeDaemon::LogStarted(const absl::Status& register_error) {
  const DecodeDaemonConfig& c = config_;
  const DecodeEngineStats stats = engine_->stats();
  daemon::LogInfo(
      "decode_started",
      {{"model", c.model_name},
       {"backend", c.backend},
       {"device", device_},
       {"kernels", kernels_},
       {"instance_id", c.instance_id},
       {"rpc_address", rpc_address_},
       {"data_plane", data_plane_address_},
       {"http_port", http_port()},
       {"pair_digest", pair_digest_hex_},
       {"kv_budget_bytes", stats.kv_budget_bytes},
       {"kv_budget_of_host", stats.kv_budget_of_host},
       {"workspace_device_bytes", stats.workspace_device_bytes},
       {"workspace_host_bytes", stats.workspace_host_bytes},
       {"rebuild_device_bytes", stats.rebuild_device_bytes},
       {"rebuild_host_bytes", stats.rebuild_host_bytes},
       {"sekv_host_budget_bytes", stats.sekv_host_budget_bytes},
       {"registered", registered()},
       {"registry", RegistryName()},
       {"register_error", register_error.ok() ? "" : std::string(register_error.message())}});
}

void DecodeDaemon::Shutdown(absl::Duration drain) {
  if (shut_down_) return;
  shut_down_ = true;
  stop_ticker_.store(true);
  if (ticker_.joinable()) ticker_.join();
  // No new routes, then no new calls, then let the running ones finish.
  if (control_ != nullptr) control_->Shutdown();
  if (announcer_ != nullptr) announcer_->Shutdown();  // revokes the lease: the key goes now
  if (service_ != nullptr) service_->StopAccepting();
  if (http_ != nullptr) {
    // /ready turns 503 at once; /health keeps answering until the end.
  }
  const absl::Time until = absl::Now() + drain;
  while (service_ != nullptr && service_->in_flight() > 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (grpc_.server != nullptr) {
    grpc_.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  engine_.reset();  // ends anything still running with an error event
  if (mailbox_ != nullptr) mailbox_->Stop();
  if (http_ != nullptr) http_->Shutdown(std::chrono::milliseconds(0));
  daemon::LogInfo("decode_stopped", {{"instance_id", config_.instance_id}});
}

DecodeDaemon::~DecodeDaemon() { Shutdown(absl::ZeroDuration()); }

}  // namespace scd
