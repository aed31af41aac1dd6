// The decode daemon's state series on /metrics (docs/CONFIG.md, "Metrics"): the gauges and
// counters that describe the engine, the data-plane mailbox and the registration, sampled
// every 100 ms by the daemon's ticker rather than from the heartbeat, so that they stay
// current while the control plane is unreachable. Counters of the engine's own counts advance
// by each count's growth since the previous sample. The SEKV cache series are the engine's
// callback's (AddSekvCacheMetrics).
#ifndef SCD_DECODE_SERVER_DECODE_METRICS_H_
#define SCD_DECODE_SERVER_DECODE_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics/registry.h"
#include "common/rpc/decode_registry.h"
#include "common/serving/decode_engine.h"
#include "decode_server/payload_mailbox.h"

namespace scd {

class DecodeMetrics {
 public:
  // Registers every series in `registry`, which must outlive the result; `backend` and
  // `device` label scd_decode_backend_info.
  static absl::StatusOr<std::unique_ptr<DecodeMetrics>> Create(metrics::Registry* registry,
                                                               const std::string& backend,
                                                               const std::string& device);

  // The memory the engine took at start (KV and SEKV host budgets, scratch).
  void SetBudgets(const DecodeEngineStats& stats);
  // One sample of the engine and the mailbox. Logs what an operator must see once:
  // cuda_graphs_disabled, sekv_cpu_tier_copied, payloads_orphaned.
  void Sample(const DecodeEngine& engine, const PayloadMailboxStats& mailbox);
  void SetRegistered(bool registered);
  // The stage rates the heartbeats report (StageRateTracker), as gauges.
  void SetStageRates(const rpc::StageRates& rates);

 private:
  DecodeMetrics() = default;
  absl::Status Register(metrics::Registry* registry);
  absl::Status RegisterEngineSeries(metrics::Registry* registry);
  absl::Status RegisterMemorySeries(metrics::Registry* registry);
  void SetScratch(const DecodeEngineStats& s);
  void SampleEngine(const DecodeEngineStats& s);
  void SampleMailbox(const PayloadMailboxStats& now);

  metrics::Gauge *active_ = nullptr, *queued_ = nullptr, *starting_ = nullptr;
  metrics::Counter *prefill_chunks_ = nullptr, *prefill_tokens_ = nullptr;
  metrics::Counter *rebuild_chunks_ = nullptr, *rebuild_rows_ = nullptr;
  metrics::Gauge *registered_ = nullptr, *pending_ = nullptr;
  metrics::GaugeFamily* stage_rates_ = nullptr;  // {stage, mode}
  metrics::CounterFamily *payloads_ = nullptr, *graph_steps_ = nullptr;
  metrics::Gauge *graphs_active_ = nullptr, *graph_bytes_ = nullptr;
  metrics::Counter *sekv_copies_ = nullptr, *sekv_steps_ = nullptr, *sekv_step_rows_ = nullptr;
  metrics::Counter *mixed_steps_ = nullptr, *kv_waits_ = nullptr, *past_host_wait_ = nullptr;
  metrics::Gauge *kv_budget_ = nullptr, *kv_reserved_ = nullptr;
  metrics::Gauge *host_budget_ = nullptr, *host_reserved_ = nullptr;
  metrics::GaugeFamily* info_ = nullptr;
  metrics::GaugeFamily* scratch_ = nullptr;

  // The previous sample, for the counters that follow a source count.
  PayloadMailboxStats last_mailbox_;
  DecodeGraphStats last_graphs_;
  long last_chunks_ = 0, last_tokens_ = 0, last_rebuilds_ = 0, last_rows_ = 0, last_copies_ = 0,
       last_kv_waits_ = 0, last_sekv_steps_ = 0, last_sekv_rows_ = 0, last_mixed_ = 0,
       last_past_host_wait_ = 0;
};

// The SEKV path's series: bytes of every SEKV cache, measured from its structures after the
// request's first decode step (sets o->on_cache).
absl::Status AddSekvCacheMetrics(metrics::Registry* registry, SekvServingOptions* o);

}  // namespace scd

#endif  // SCD_DECODE_SERVER_DECODE_METRICS_H_
