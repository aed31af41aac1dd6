// See decode_daemon.h.
#include "decode_server/decode_daemon.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/daemon/event_log.h"
#include "common/model/weights.h"
#include "common/scd/codec.h"
#include "common/scd/wire_format.h"
#include "common/sekv/sekv_artifact.h"

namespace scd {
namespace {

std::string RandomSuffix() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(static_cast<uint32_t>(rd()), absl::kZeroPad8));
}

// The SEKV path's engine options (config keys sekv.*) and its metrics: bytes of every SEKV
// cache, measured from its structures after the request's first decode step.
absl::Status ConfigureSekv(const DecodeDaemonConfig& c, const Model& model,
                           metrics::Registry* registry, SekvServingOptions* o) {
  o->enabled = true;
  o->budget = c.sekv_budget;
  o->max_host_bytes = c.sekv_max_host_bytes;
  o->host_memory_fraction = c.sekv_host_memory_fraction;
  o->min_prompt_tokens = c.sekv_min_prompt_tokens;
  o->gpu = c.sekv_gpu;
  o->gpu_tier = c.sekv_gpu_f32 ? sekv::GpuTier::kF32 : sekv::GpuTier::kBf16;
  o->gpu_zoom = c.sekv_gpu_host_zoom ? sekv::GpuZoom::kHost : sekv::GpuZoom::kDevice;
  if (!c.sekv_router.empty()) {
    SCD_ASSIGN_OR_RETURN(sekv::SekvArtifact a, sekv::SekvArtifact::Load(c.sekv_router));
    if (absl::Status st = a.CheckModel(model); !st.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("sekv router ", c.sekv_router,
                                                        " does not fit model ", c.model_path,
                                                        ": ", std::string(st.message())));
    }
    o->router = std::make_shared<const sekv::ZoomRouter>(std::move(a.router));
  }
  SCD_ASSIGN_OR_RETURN(metrics::Counter * requests,
                       registry->AddCounter("scd_decode_sekv_requests_total",
                                            "Requests served through a SEKV cache."));
  SCD_ASSIGN_OR_RETURN(
      metrics::Counter * gpu_total,
      registry->AddCounter("scd_decode_sekv_gpu_bytes_total",
                           "GPU-tier bytes of SEKV caches (anchors, summaries, window, pinned "
                           "tokens, expansion buffer), summed over requests after their first "
                           "decode step."));
  SCD_ASSIGN_OR_RETURN(
      metrics::Counter * full_total,
      registry->AddCounter("scd_decode_sekv_full_kv_bytes_total",
                           "Bytes a full KV cache of the same positions would hold, summed "
                           "like scd_decode_sekv_gpu_bytes_total."));
  SCD_ASSIGN_OR_RETURN(metrics::Gauge * gpu_now,
                       registry->AddGauge("scd_decode_sekv_gpu_bytes",
                                          "GPU-tier bytes of the running requests' SEKV caches."));
  SCD_ASSIGN_OR_RETURN(
      metrics::Counter * cpu_total,
      registry->AddCounter("scd_decode_sekv_cpu_bytes_total",
                           "Host bytes of SEKV caches' CPU tiers (the per-span low-rank bases, "
                           "and a pinned copy of them where the GPU needs one), summed like "
                           "scd_decode_sekv_gpu_bytes_total."));
  SCD_ASSIGN_OR_RETURN(metrics::Gauge * cpu_now,
                       registry->AddGauge("scd_decode_sekv_cpu_bytes",
                                          "Host bytes of the running requests' SEKV CPU tiers."));
  o->on_cache = [=](const sekv::MemoryBreakdown& m, bool started) {
    const double gpu = static_cast<double>(m.gpu()), cpu = static_cast<double>(m.cpu_bases);
    if (started) {
      requests->Increment();
      gpu_total->Increment(gpu);
      full_total->Increment(static_cast<double>(m.full_kv));
      cpu_total->Increment(cpu);
      gpu_now->Add(gpu);
      cpu_now->Add(cpu);
    } else {
      gpu_now->Subtract(gpu);
      cpu_now->Subtract(cpu);
    }
  };
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeDaemon>> DecodeDaemon::Create(DecodeDaemonConfig config) {
  if (config.model_name.empty()) return absl::InvalidArgumentError("config key 'model.name' is required");
  if (config.model_path.empty()) return absl::InvalidArgumentError("config key 'model.path' is required");
  if (config.control_plane.empty()) {
    return absl::InvalidArgumentError("config key 'control_plane.address' is required");
  }
  if (config.artifact_path.empty() && config.producer_path.empty()) {
    return absl::InvalidArgumentError(
        "config needs 'model.artifact' (the pair's calibration artifact) or "
        "'model.producer_path' (the base checkpoint, for the pair digest)");
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
  const DecodeDaemonConfig& c = config_;
  // Model, tokenizer, artifact, pair identity.
  SCD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, LoadModel(c.model_path));
  SCD_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::FromFile(c.model_path + "/tokenizer.json"));
  std::shared_ptr<const ScdArtifact> artifact;
  std::string producer_digest;
  if (!c.artifact_path.empty()) {
    SCD_ASSIGN_OR_RETURN(ScdArtifact a, ScdArtifact::Load(c.artifact_path));
    if (absl::Status st = a.CheckPair(nullptr, model.get()); !st.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("artifact ", c.artifact_path, " does not fit model ", c.model_path, ": ",
                       std::string(st.message())));
    }
    producer_digest = a.producer_digest;
    artifact = std::make_shared<const ScdArtifact>(std::move(a));
  } else {
    SCD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> producer, LoadModel(c.producer_path));
    producer_digest = producer->digest;
  }
  pair_digest_hex_ = PairDigestHex(
      MakePairDigest(producer_digest, model->digest, artifact != nullptr ? artifact->id : ""));

  SCD_ASSIGN_OR_RETURN(BackendKind kind, ParseBackendKind(c.backend));
  BackendOptions backend_options;
  backend_options.cuda_graphs = c.cuda_graphs;
  backend_options.cuda_graph_max_batch = c.cuda_graph_max_batch;
  backend_options.cuda_kernels = c.cuda_kernels;
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                       CreateBackend(kind, model, backend_options));
  const std::string device = backend->device_description();
  const std::string kernels = backend->kernel_description();
  CodecOptions codec_options;
  codec_options.gpu_rebuild = c.gpu_rebuild;
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<ConsumerCodec> codec,
                       ConsumerCodec::Create(model, producer_digest, artifact, codec_options));
  DecodeEngineOptions eo;
  eo.max_batch = c.max_batch;
  eo.max_queue = c.max_queue;
  eo.min_step_interval = c.min_step_interval;
  eo.prefill_chunk = c.prefill_chunk;
  eo.rebuild_chunk = c.rebuild_chunk;
  eo.kv_budget_bytes = c.kv_budget_bytes;
  eo.kv_memory_fraction = c.kv_memory_fraction;
  if (c.sekv_enabled) SCD_RETURN_IF_ERROR(ConfigureSekv(c, *model, &metrics_, &eo.sekv));
  SCD_ASSIGN_OR_RETURN(engine_, DecodeEngine::Create(std::move(backend), std::move(codec), eo));

  // Data plane.
  transport::TransportOptions to;
  to.ucx_transports = c.ucx_transports;
  to.peer_timeout = c.data_plane_peer_timeout;
  to.stall_timeout = c.data_plane_peer_timeout;
  SCD_ASSIGN_OR_RETURN(transport_, transport::CreateTransport(c.data_plane_transport, to));
  SCD_ASSIGN_OR_RETURN(listener_, transport_->Listen(absl::StrCat(c.data_plane_transport, "://",
                                                                  c.data_plane_listen)));
  // A wildcard listen address (0.0.0.0) cannot be dialled from another host or container.
  data_plane_address_ = c.data_plane_advertise.empty()
                            ? listener_->address()
                            : absl::StrCat(c.data_plane_transport, "://", c.data_plane_advertise);
  PayloadMailboxOptions mo;
  mo.max_bytes = c.mailbox_max_bytes;
  mo.ttl = c.mailbox_ttl;
  mo.orphan_ttl = std::min(c.payload_wait, c.mailbox_ttl);
  mailbox_ = std::make_unique<PayloadMailbox>(listener_.get(), mo);

  // gRPC Decode service.
  DecodeServiceOptions so;
  so.model_name = c.model_name;
  so.max_tokens = c.max_tokens;
  so.default_deadline = c.default_deadline;
  so.payload_wait = c.payload_wait;
  service_ = std::make_unique<DecodeService>(engine_.get(), mailbox_.get(), tokenizer_.get(), so,
                                            &metrics_);
  rpc::GrpcServerOptions go;
  go.address = c.rpc_listen;
  go.keepalive_time = c.grpc_keepalive_time;
  go.keepalive_timeout = c.grpc_keepalive_timeout;
  SCD_ASSIGN_OR_RETURN(go.credentials, rpc::MakeServerCredentials(c.rpc_tls));
  SCD_ASSIGN_OR_RETURN(grpc_, rpc::StartGrpcServer(go, {service_.get()}));
  rpc_address_ = c.rpc_advertise.empty() ? grpc_.address : c.rpc_advertise;

  // Health and metrics.
  auto* active = metrics_.AddGauge("scd_decode_active_requests",
                                   "Requests in the running batch (sampled each heartbeat).")
                     .value();
  auto* queued = metrics_.AddGauge("scd_decode_queued_requests",
                                   "Requests waiting for a batch slot (sampled each heartbeat).")
                     .value();
  auto* starting = metrics_
                       .AddGauge("scd_decode_starting_requests",
                                 "Of scd_decode_active_requests, those whose prompt is still "
                                 "being prefilled (or whose SEKV hierarchy is being built).")
                       .value();
  auto* prefill_chunks =
      metrics_
          .AddCounter("scd_decode_prefill_chunks_total",
                      "Prefills of prompt tokens, at most engine.prefill_chunk tokens each, "
                      "run between the running requests' decode steps.")
          .value();
  auto* prefill_tokens = metrics_
                             .AddCounter("scd_decode_prefill_tokens_total",
                                         "Prompt tokens the decode daemon prefilled itself "
                                         "(suffixes and oracle payloads).")
                             .value();
  auto* rebuild_chunks =
      metrics_
          .AddCounter("scd_decode_rebuild_chunks_total",
                      "Rebuilds of payload rows, about engine.rebuild_chunk rows each, run "
                      "between the running requests' decode steps.")
          .value();
  auto* rebuild_rows = metrics_
                           .AddCounter("scd_decode_rebuild_rows_total",
                                       "Payload rows (tokens) rebuilt into KV caches (every "
                                       "mode but oracle).")
                           .value();
  auto* registered = metrics_.AddGauge("scd_decode_registered",
                                       "1 while registered with the control plane.")
                         .value();
  auto* pending = metrics_
                      .AddGauge("scd_decode_pending_payloads",
                                "Payloads on the data plane waiting for their Decode RPC.")
                      .value();
  auto* payloads =
      metrics_
          .AddCounterFamily("scd_decode_payloads_total",
                            "Data-plane payloads by fate: received, taken, corrupted, expired "
                            "(TTL), evicted (byte cap), orphaned (sender hung up).",
                            {"outcome"})
          .value();
  auto* graph_steps =
      metrics_
          .AddCounterFamily(
              "scd_decode_cuda_graph_steps_total",
              "Batched decode steps by how the CUDA backend ran them: replay (a recorded CUDA "
              "graph), capture (recorded, then launched), eager (kernel by kernel: graphs off, "
              "a batch above cuda_graphs.max_batch, or after a refused capture). None on the "
              "CPU backend.",
              {"mode"})
          .value();
  auto* graphs_active = metrics_
                            .AddGauge("scd_decode_cuda_graphs_active",
                                      "1 while the CUDA backend replays decode steps as graphs.")
                            .value();
  auto* graph_bytes =
      metrics_
          .AddGauge("scd_decode_cuda_graph_device_bytes",
                    "Device memory the CUDA decode graphs held now take (what the device lost "
                    "across each one's instantiation). It comes out of the memory the KV budget "
                    "leaves free (1 - engine.kv_memory_fraction). 0 on the CPU backend.")
          .value();
  auto* sekv_copies =
      metrics_
          .AddCounter("scd_decode_sekv_cpu_tier_copies_total",
                      "SEKV requests whose GPU mirror reads a pinned copy of the CPU tier, as the "
                      "device refused to register it where it lies (each logs "
                      "sekv_cpu_tier_copied with the reason). None on the CPU backend.")
          .value();
  auto* sekv_steps =
      metrics_
          .AddCounter("scd_decode_sekv_steps_total",
                      "Decode steps of the SEKV requests: each decodes all of them at once, "
                      "reading the weights once.")
          .value();
  auto* sekv_step_rows =
      metrics_
          .AddCounter("scd_decode_sekv_step_rows_total",
                      "Tokens those steps decoded; over scd_decode_sekv_steps_total, the mean "
                      "SEKV batch.")
          .value();
  auto* mixed_steps =
      metrics_
          .AddCounter("scd_decode_mixed_steps_total",
                      "Decode steps that ran the SEKV requests and the plain ones (prompts under "
                      "sekv.min_prompt_tokens) in one model step, reading the weights once.")
          .value();
  auto* kv_budget =
      metrics_
          .AddGauge("scd_decode_kv_budget_bytes",
                    "Memory for the admitted requests' KV caches (engine.kv_budget_bytes, or "
                    "engine.kv_memory_fraction of the device's free memory at start, the host's "
                    "on the CPU backend); 0: no limit.")
          .value();
  auto* kv_reserved =
      metrics_
          .AddGauge("scd_decode_kv_reserved_bytes",
                    "KV cache bytes the admitted requests reserve now (each its prompt plus "
                    "max_tokens positions).")
          .value();
  auto* kv_waits =
      metrics_
          .AddCounter("scd_decode_kv_waits_total",
                      "Requests that waited in the queue for KV memory (each counted once).")
          .value();
  auto* past_host_wait =
      metrics_
          .AddCounter("scd_decode_admitted_past_host_wait_total",
                      "Plain requests admitted past a queued SEKV request that waited for host "
                      "memory alone (they need none, and its KV memory stays free).")
          .value();
  auto* host_budget =
      metrics_
          .AddGauge("scd_decode_sekv_host_budget_bytes",
                    "Host memory for the SEKV requests' prompts and hierarchies "
                    "(sekv.max_host_bytes, or sekv.host_memory_fraction of the host's available "
                    "memory at start); 0: no limit.")
          .value();
  auto* host_reserved =
      metrics_
          .AddGauge("scd_decode_sekv_host_reserved_bytes",
                    "Host memory the admitted SEKV requests reserve now (sekv.max_host_bytes): "
                    "a bound on the build's peak, then what the hierarchy holds.")
          .value();
  // What serves, as an info series: value 1, the facts in its labels.
  metrics_
      .AddGaugeFamily("scd_decode_backend_info", "The backend serving and its device (value 1).",
                      {"backend", "device"})
      .value()
      ->WithLabels({c.backend, device})
      .value()
      ->Set(1);
  auto* scratch =
      metrics_
          .AddGaugeFamily(
              "scd_decode_scratch_bytes",
              "Memory taken at start beside the weights and the KV caches, by part: backend (its "
              "activations, logits, attention and sampling workspaces and staging for the "
              "engine's largest calls) and scd_rebuild (the SCD GPU rebuilder's decoders, "
              "aligners and buffers for a payload chunk); memory: device or pinned_host. 0 on "
              "the CPU backend.",
              {"part", "memory"})
          .value();
  kv_budget->Set(static_cast<double>(engine_->stats().kv_budget_bytes));
  host_budget->Set(static_cast<double>(engine_->stats().sekv_host_budget_bytes));
  // The rebuilder's series may grow later (a payload patching a layer outside the artifact's
  // selection): the ticker keeps them current.
  auto gauge = [scratch](const char* part, const char* memory) {
    return scratch->WithLabels({part, memory}).value();
  };
  auto set_scratch =
      [backend_device = gauge("backend", "device"), backend_host = gauge("backend", "pinned_host"),
       rebuild_device = gauge("scd_rebuild", "device"),
       rebuild_host = gauge("scd_rebuild", "pinned_host")](const DecodeEngineStats& s) {
        backend_device->Set(static_cast<double>(s.workspace_device_bytes));
        backend_host->Set(static_cast<double>(s.workspace_host_bytes));
        rebuild_device->Set(static_cast<double>(s.rebuild_device_bytes));
        rebuild_host->Set(static_cast<double>(s.rebuild_host_bytes));
      };
  set_scratch(engine_->stats());
  if (c.http_port >= 0) {
    http::HttpServerOptions ho;
    ho.host = c.http_host;
    ho.port = c.http_port;
    ho.metrics = &metrics_;
    SCD_ASSIGN_OR_RETURN(http_, http::HttpServer::Create(ho));
    http_->AddHealthRoute();
    http_->AddReadyRoute([this]() -> absl::Status {
      if (control_ == nullptr || !control_->registered()) {
        absl::Status last = control_ != nullptr ? control_->last_error() : absl::OkStatus();
        return absl::UnavailableError(absl::StrCat(
            "not registered with the control plane at ", config_.control_plane,
            last.ok() ? "" : absl::StrCat(": ", std::string(last.message()))));
      }
      return absl::OkStatus();
    });
    http_->AddMetricsRoute(&metrics_);
    SCD_RETURN_IF_ERROR(http_->Start());
  }

  // Register last: from here on the prefill daemon may route requests here.
  rpc::ControlPlaneClientOptions co;
  co.target = c.control_plane;
  co.channel = c.control_plane_channel;
  co.cluster_token = c.cluster_token;
  co.instance.instance_id = c.instance_id;
  co.instance.model_name = c.model_name;
  co.instance.pair_digest = pair_digest_hex_;
  co.instance.capacity = c.max_batch + c.max_queue;
  co.instance.data_plane_address = data_plane_address_;
  co.instance.rpc_address = rpc_address_;
  co.channel.keepalive_time = c.grpc_keepalive_time;
  co.channel.keepalive_timeout = c.grpc_keepalive_timeout;
  co.load_report = [this]() {
    rpc::LoadReport r;
    r.active_requests = engine_->running();
    r.queue_depth = engine_->queued();
    return r;
  };
  SCD_ASSIGN_OR_RETURN(control_, rpc::ControlPlaneClient::Create(co));
  absl::Status st = control_->Start(c.register_wait);
  if (!st.ok() && st.code() != absl::StatusCode::kUnavailable) {
    return absl::Status(st.code(), absl::StrCat("registration refused by the control plane at ",
                                                c.control_plane, ": ",
                                                std::string(st.message())));
  }
  registered->Set(control_->registered() ? 1 : 0);
  was_registered_.store(control_->registered());
  // State gauges and registration changes, sampled every 100 ms rather than from the
  // heartbeat: while the control plane is unreachable no heartbeat runs, and the loss itself
  // is what must show up.
  ticker_ = std::thread([this, active, queued, starting, prefill_chunks, prefill_tokens,
                         rebuild_chunks, rebuild_rows, registered, pending, payloads, graph_steps,
                         graphs_active, graph_bytes, sekv_copies, sekv_steps, sekv_step_rows,
                         mixed_steps, kv_reserved, kv_waits, host_reserved, past_host_wait,
                         set_scratch] {
    PayloadMailboxStats last;
    DecodeGraphStats last_graphs;
    long last_chunks = 0, last_tokens = 0, last_rebuilds = 0, last_rows = 0, last_copies = 0,
         last_kv_waits = 0, last_sekv_steps = 0, last_sekv_rows = 0, last_mixed = 0,
         last_past_host_wait = 0;
    // Counter `label` of `family` advanced by a source counter's growth since the last tick.
    auto add = [](auto* family, const char* label, int64_t before, int64_t after) {
      if (after > before) family->WithLabels({label}).value()->Increment(after - before);
    };
    // `counter` advanced by a source counter's growth since *last, which becomes `now`.
    auto advance = [](metrics::Counter* counter, long* last, long now) {
      if (now > *last) counter->Increment(static_cast<double>(now - *last));
      *last = now;
    };
    while (!stop_ticker_.load()) {
      active->Set(engine_->running());
      queued->Set(engine_->queued());
      starting->Set(engine_->starting());
      const DecodeEngineStats engine_stats = engine_->stats();
      set_scratch(engine_stats);
      advance(prefill_chunks, &last_chunks, engine_stats.prefill_chunks);
      advance(prefill_tokens, &last_tokens, engine_stats.prefill_tokens);
      advance(rebuild_chunks, &last_rebuilds, engine_stats.rebuild_chunks);
      advance(rebuild_rows, &last_rows, engine_stats.rebuild_rows);
      const DecodeGraphStats& graphs = engine_stats.graphs;
      add(graph_steps, "replay", last_graphs.replays, graphs.replays);
      add(graph_steps, "capture", last_graphs.captures, graphs.captures);
      add(graph_steps, "eager", last_graphs.eager_steps, graphs.eager_steps);
      graphs_active->Set(graphs.active ? 1 : 0);
      graph_bytes->Set(static_cast<double>(graphs.device_bytes));
      if (graphs.capture_failures > last_graphs.capture_failures) {
        daemon::LogWarning("cuda_graphs_disabled", {{"reason", graphs.last_failure}});
      }
      last_graphs = graphs;
      if (engine_stats.sekv_cpu_tier_copies > last_copies) {
        daemon::LogWarning("sekv_cpu_tier_copied",
                           {{"requests", engine_stats.sekv_cpu_tier_copies - last_copies},
                            {"reason", engine_stats.sekv_cpu_tier_copy_reason}});
      }
      advance(sekv_copies, &last_copies, engine_stats.sekv_cpu_tier_copies);
      advance(sekv_steps, &last_sekv_steps, engine_stats.sekv_steps);
      advance(sekv_step_rows, &last_sekv_rows, engine_stats.sekv_step_rows);
      advance(mixed_steps, &last_mixed, engine_stats.mixed_steps);
      kv_reserved->Set(static_cast<double>(engine_stats.kv_reserved_bytes));
      host_reserved->Set(static_cast<double>(engine_stats.sekv_host_reserved_bytes));
      advance(kv_waits, &last_kv_waits, engine_stats.kv_waits);
      advance(past_host_wait, &last_past_host_wait, engine_stats.admitted_past_host_wait);
      const PayloadMailboxStats now = mailbox_->stats();
      pending->Set(static_cast<double>(now.pending));
      add(payloads, "received", last.received, now.received);
      add(payloads, "taken", last.taken, now.taken);
      add(payloads, "corrupted", last.corrupted, now.corrupted);
      add(payloads, "expired", last.expired, now.expired);
      add(payloads, "evicted", last.evicted, now.evicted);
      add(payloads, "orphaned", last.orphaned, now.orphaned);
      if (now.orphaned > last.orphaned) {
        daemon::LogInfo("payloads_orphaned",
                        {{"count", now.orphaned - last.orphaned}, {"pending", now.pending}});
      }
      last = now;
      const bool now_registered = control_->registered();
      registered->Set(now_registered ? 1 : 0);
      if (now_registered != was_registered_.exchange(now_registered)) {
        // Registration changes are rare and operationally interesting (prefill restarts,
        // network loss), so each is one log line.
        const absl::Status error = control_->last_error();
        daemon::LogInfo(now_registered ? "registered" : "registration_lost",
                        {{"instance_id", config_.instance_id},
                         {"control_plane", config_.control_plane},
                         {"registrations", control_->registrations()},
                         {"last_error", std::string(error.message())}});
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  daemon::LogInfo("decode_started",
                  {{"model", c.model_name},
                   {"backend", c.backend},
                   {"device", device},
                   {"kernels", kernels},
                   {"instance_id", c.instance_id},
                   {"rpc_address", rpc_address_},
                   {"data_plane", data_plane_address_},
                   {"http_port", http_port()},
                   {"pair_digest", pair_digest_hex_},
                   {"kv_budget_bytes", engine_->stats().kv_budget_bytes},
                   {"kv_budget_of_host", engine_->stats().kv_budget_of_host},
                   {"workspace_device_bytes", engine_->stats().workspace_device_bytes},
                   {"workspace_host_bytes", engine_->stats().workspace_host_bytes},
                   {"rebuild_device_bytes", engine_->stats().rebuild_device_bytes},
                   {"rebuild_host_bytes", engine_->stats().rebuild_host_bytes},
                   {"sekv_host_budget_bytes", engine_->stats().sekv_host_budget_bytes},
                   {"registered", control_->registered()},
                   {"control_plane", c.control_plane},
                   {"register_error", st.ok() ? "" : std::string(st.message())}});
  return absl::OkStatus();
}

void DecodeDaemon::Shutdown(absl::Duration drain) {
  if (shut_down_) return;
  shut_down_ = true;
  stop_ticker_.store(true);
  if (ticker_.joinable()) ticker_.join();
  // No new routes, then no new calls, then let the running ones finish.
  if (control_ != nullptr) control_->Shutdown();
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
