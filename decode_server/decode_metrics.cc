// See decode_metrics.h.
#include "decode_server/decode_metrics.h"

#include "common/base/status_macros.h"
#include "common/daemon/event_log.h"

namespace scd {
namespace {

// Counter `label` of `family` advanced by a source counter's growth since the last sample.
void Add(metrics::CounterFamily* family, const char* label, int64_t before, int64_t after) {
  if (after > before) family->WithLabels({label}).value()->Increment(after - before);
}

// `counter` advanced by a source counter's growth since *last, which becomes `now`.
void Advance(metrics::Counter* counter, long* last, long now) {
  if (now > *last) counter->Increment(static_cast<double>(now - *last));
  *last = now;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeMetrics>> DecodeMetrics::Create(metrics::Registry* registry,
                                                                     const std::string& backend,
                                                                     const std::string& device) {
  std::unique_ptr<DecodeMetrics> m(new DecodeMetrics());
  SCD_RETURN_IF_ERROR(m->Register(registry));
  SCD_RETURN_IF_ERROR(m->RegisterEngineSeries(registry));
  SCD_RETURN_IF_ERROR(m->RegisterMemorySeries(registry));
  // What serves, as an info series: value 1, the facts in its labels.
  SCD_ASSIGN_OR_RETURN(metrics::Gauge * info, m->info_->WithLabels({backend, device}));
  info->Set(1);
  return m;
}

absl::Status DecodeMetrics::Register(metrics::Registry* registry) {
  SCD_ASSIGN_OR_RETURN(
      stage_rates_,
      registry->AddGaugeFamily("scd_decode_stage_seconds_per_token",
                               "Seconds per token of recent work, as heartbeats report it to the "
                               "prefill daemons: a payload's rebuild by mode, and the suffix "
                               "prefill (mode \"\").",
                               {"stage", "mode"}));
  SCD_ASSIGN_OR_RETURN(
      active_, registry->AddGauge("scd_decode_active_requests",
                                  "Requests in the running batch (sampled each heartbeat)."));
  SCD_ASSIGN_OR_RETURN(
      queued_, registry->AddGauge("scd_decode_queued_requests",
                                  "Requests waiting for a batch slot (sampled each heartbeat)."));
  SCD_ASSIGN_OR_RETURN(
      starting_, registry->AddGauge("scd_decode_starting_requests",
                                    "Of scd_decode_active_requests, those whose prompt is still "
                                    "being prefilled (or whose SEKV hierarchy is being built)."));
  SCD_ASSIGN_OR_RETURN(
      prefill_chunks_,
      registry->AddCounter("scd_decode_prefill_chunks_total",
                           "Prefills of prompt tokens, at most engine.prefill_chunk tokens each, "
                           "run between the running requests' decode steps."));
  SCD_ASSIGN_OR_RETURN(prefill_tokens_,
                       registry->AddCounter("scd_decode_prefill_tokens_total",
                                            "Prompt tokens the decode daemon prefilled itself "
                                            "(suffixes and oracle payloads)."));
  SCD_ASSIGN_OR_RETURN(
      rebuild_chunks_,
      registry->AddCounter("scd_decode_rebuild_chunks_total",
                           "Rebuilds of payload rows, about engine.rebuild_chunk rows each, run "
                           "between the running requests' decode steps."));
  SCD_ASSIGN_OR_RETURN(rebuild_rows_,
                       registry->AddCounter("scd_decode_rebuild_rows_total",
                                            "Payload rows (tokens) rebuilt into KV caches (every "
                                            "mode but oracle)."));
  SCD_ASSIGN_OR_RETURN(
      registered_,
      registry->AddGauge("scd_decode_registered", "1 while registered with the control plane."));
  SCD_ASSIGN_OR_RETURN(
      pending_, registry->AddGauge("scd_decode_pending_payloads",
                                   "Payloads on the data plane waiting for their Decode RPC."));
  SCD_ASSIGN_OR_RETURN(
      payloads_,
      registry->AddCounterFamily("scd_decode_payloads_total",
                                 "Data-plane payloads by fate: received, taken, corrupted, expired "
                                 "(TTL), evicted (byte cap), orphaned (sender hung up).",
                                 {"outcome"}));
  return absl::OkStatus();
}

absl::Status DecodeMetrics::RegisterEngineSeries(metrics::Registry* registry) {
  SCD_ASSIGN_OR_RETURN(
      graph_steps_,
      registry->AddCounterFamily(
          "scd_decode_cuda_graph_steps_total",
          "Batched decode steps by how the CUDA backend ran them: replay (a recorded CUDA "
          "graph), capture (recorded, then launched), eager (kernel by kernel: graphs off, "
          "a batch above cuda_graphs.max_batch, or after a refused capture). None on the "
          "CPU backend.",
          {"mode"}));
  SCD_ASSIGN_OR_RETURN(
      graphs_active_,
      registry->AddGauge("scd_decode_cuda_graphs_active",
                         "1 while the CUDA backend replays decode steps as graphs."));
  SCD_ASSIGN_OR_RETURN(
      graph_bytes_,
      registry->AddGauge(
          "scd_decode_cuda_graph_device_bytes",
          "Device memory the CUDA decode graphs held now take (what the device lost "
          "across each one's instantiation). It comes out of the memory the KV budget "
          "leaves free (1 - engine.kv_memory_fraction). 0 on the CPU backend."));
  SCD_ASSIGN_OR_RETURN(
      sekv_copies_,
      registry->AddCounter(
          "scd_decode_sekv_cpu_tier_copies_total",
          "SEKV requests whose GPU mirror reads a pinned copy of the CPU tier, as the "
          "device refused to register it where it lies (each logs "
          "sekv_cpu_tier_copied with the reason). None on the CPU backend."));
  SCD_ASSIGN_OR_RETURN(
      sekv_steps_,
      registry->AddCounter("scd_decode_sekv_steps_total",
                           "Decode steps of the SEKV requests: each decodes all of them at once, "
                           "reading the weights once."));
  SCD_ASSIGN_OR_RETURN(
      sekv_step_rows_,
      registry->AddCounter("scd_decode_sekv_step_rows_total",
                           "Tokens those steps decoded; over scd_decode_sekv_steps_total, the mean "
                           "SEKV batch."));
  SCD_ASSIGN_OR_RETURN(
      mixed_steps_, registry->AddCounter(
                        "scd_decode_mixed_steps_total",
                        "Decode steps that ran the SEKV requests and the plain ones (prompts under "
                        "sekv.min_prompt_tokens) in one model step, reading the weights once."));
  return absl::OkStatus();
}

absl::Status DecodeMetrics::RegisterMemorySeries(metrics::Registry* registry) {
  SCD_ASSIGN_OR_RETURN(
      kv_budget_, registry->AddGauge(
                      "scd_decode_kv_budget_bytes",
                      "Memory for the admitted requests' KV caches (engine.kv_budget_bytes, or "
                      "engine.kv_memory_fraction of the device's free memory at start, the host's "
                      "on the CPU backend); 0: no limit."));
  SCD_ASSIGN_OR_RETURN(
      kv_reserved_,
      registry->AddGauge("scd_decode_kv_reserved_bytes",
                         "KV cache bytes the admitted requests reserve now (each its prompt plus "
                         "max_tokens positions)."));
  SCD_ASSIGN_OR_RETURN(
      kv_waits_,
      registry->AddCounter("scd_decode_kv_waits_total",
                           "Requests that waited in the queue for KV memory (each counted once)."));
  SCD_ASSIGN_OR_RETURN(
      past_host_wait_,
      registry->AddCounter(
          "scd_decode_admitted_past_host_wait_total",
          "Plain requests admitted past a queued SEKV request that waited for host "
          "memory alone (they need none, and its KV memory stays free)."));
  SCD_ASSIGN_OR_RETURN(
      host_budget_,
      registry->AddGauge(
          "scd_decode_sekv_host_budget_bytes",
          "Host memory for the SEKV requests' prompts and hierarchies "
          "(sekv.max_host_bytes, or sekv.host_memory_fraction of the host's available "
          "memory at start); 0: no limit."));
  SCD_ASSIGN_OR_RETURN(
      host_reserved_,
      registry->AddGauge(
          "scd_decode_sekv_host_reserved_bytes",
          "Host memory the admitted SEKV requests reserve now (sekv.max_host_bytes): "
          "a bound on the build's peak, then what the hierarchy holds."));
  // What serves, as an info series (set in Create).
  SCD_ASSIGN_OR_RETURN(info_,
                       registry->AddGaugeFamily("scd_decode_backend_info",
                                                "The backend serving and its device (value 1).",
                                                {"backend", "device"}));
  SCD_ASSIGN_OR_RETURN(
      scratch_,
      registry->AddGaugeFamily(
          "scd_decode_scratch_bytes",
          "Memory taken at start beside the weights and the KV caches, by part: backend (its "
          "activations, logits, attention and sampling workspaces and staging for the "
          "engine's largest calls) and scd_rebuild (the SCD GPU rebuilder's decoders, "
          "aligners and buffers for a payload chunk); memory: device or pinned_host. 0 on "
          "the CPU backend.",
          {"part", "memory"}));
  return absl::OkStatus();
}

void DecodeMetrics::SetBudgets(const DecodeEngineStats& stats) {
  kv_budget_->Set(static_cast<double>(stats.kv_budget_bytes));
  host_budget_->Set(static_cast<double>(stats.sekv_host_budget_bytes));
  SetScratch(stats);
}

// The rebuilder's series may grow later (a payload patching a layer outside the artifact's
// selection): every sample sets them.
void DecodeMetrics::SetScratch(const DecodeEngineStats& s) {
  auto set = [this](const char* part, const char* memory, int64_t bytes) {
    scratch_->WithLabels({part, memory}).value()->Set(static_cast<double>(bytes));
  };
  set("backend", "device", s.workspace_device_bytes);
  set("backend", "pinned_host", s.workspace_host_bytes);
  set("scd_rebuild", "device", s.rebuild_device_bytes);
  set("scd_rebuild", "pinned_host", s.rebuild_host_bytes);
}

void DecodeMetrics::Sample(const DecodeEngine& engine, const PayloadMailboxStats& mailbox) {
  active_->Set(engine.running());
  queued_->Set(engine.queued());
  starting_->Set(engine.starting());
  SampleEngine(engine.stats());
  SampleMailbox(mailbox);
}

void DecodeMetrics::SampleEngine(const DecodeEngineStats& s) {
  SetScratch(s);
  Advance(prefill_chunks_, &last_chunks_, s.prefill_chunks);
  Advance(prefill_tokens_, &last_tokens_, s.prefill_tokens);
  Advance(rebuild_chunks_, &last_rebuilds_, s.rebuild_chunks);
  Advance(rebuild_rows_, &last_rows_, s.rebuild_rows);
  const DecodeGraphStats& graphs = s.graphs;
  Add(graph_steps_, "replay", last_graphs_.replays, graphs.replays);
  Add(graph_steps_, "capture", last_graphs_.captures, graphs.captures);
  Add(graph_steps_, "eager", last_graphs_.eager_steps, graphs.eager_steps);
  graphs_active_->Set(graphs.active ? 1 : 0);
  graph_bytes_->Set(static_cast<double>(graphs.device_bytes));
  if (graphs.capture_failures > last_graphs_.capture_failures) {
    daemon::LogWarning("cuda_graphs_disabled", {{"reason", graphs.last_failure}});
  }
  last_graphs_ = graphs;
  if (s.sekv_cpu_tier_copies > last_copies_) {
    daemon::LogWarning("sekv_cpu_tier_copied", {{"requests", s.sekv_cpu_tier_copies - last_copies_},
                                                {"reason", s.sekv_cpu_tier_copy_reason}});
  }
  Advance(sekv_copies_, &last_copies_, s.sekv_cpu_tier_copies);
  Advance(sekv_steps_, &last_sekv_steps_, s.sekv_steps);
  Advance(sekv_step_rows_, &last_sekv_rows_, s.sekv_step_rows);
  Advance(mixed_steps_, &last_mixed_, s.mixed_steps);
  kv_reserved_->Set(static_cast<double>(s.kv_reserved_bytes));
  host_reserved_->Set(static_cast<double>(s.sekv_host_reserved_bytes));
  Advance(kv_waits_, &last_kv_waits_, s.kv_waits);
  Advance(past_host_wait_, &last_past_host_wait_, s.admitted_past_host_wait);
}

void DecodeMetrics::SampleMailbox(const PayloadMailboxStats& now) {
  const PayloadMailboxStats& last = last_mailbox_;
  pending_->Set(static_cast<double>(now.pending));
  Add(payloads_, "received", last.received, now.received);
  Add(payloads_, "taken", last.taken, now.taken);
  Add(payloads_, "corrupted", last.corrupted, now.corrupted);
  Add(payloads_, "expired", last.expired, now.expired);
  Add(payloads_, "evicted", last.evicted, now.evicted);
  Add(payloads_, "orphaned", last.orphaned, now.orphaned);
  if (now.orphaned > last.orphaned) {
    daemon::LogInfo("payloads_orphaned",
                    {{"count", now.orphaned - last.orphaned}, {"pending", now.pending}});
  }
  last_mailbox_ = now;
}

absl::Status AddSekvCacheMetrics(metrics::Registry* registry, SekvServingOptions* o) {
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

void DecodeMetrics::SetRegistered(bool registered) { registered_->Set(registered ? 1 : 0); }

void DecodeMetrics::SetStageRates(const rpc::StageRates& rates) {
  for (const auto& [mode, rate] : rates.rebuild_seconds_per_token) {
    stage_rates_->WithLabels({"rebuild", mode}).value()->Set(rate);
  }
  if (rates.prefill_seconds_per_token > 0) {
    stage_rates_->WithLabels({"prefill", ""}).value()->Set(rates.prefill_seconds_per_token);
  }
}

}  // namespace scd
