// See shadow_metrics.h.
#include "decode_server/shadow_metrics.h"

#include <memory>

#include "common/base/status_macros.h"
#include "common/daemon/event_log.h"
#include "common/metrics/metric.h"
#include "common/scd/wire_format.h"

namespace scd {
namespace {

struct ShadowSeries {
  std::string specialist;
  metrics::HistogramFamily *kl = nullptr, *top1 = nullptr, *kv = nullptr;
  metrics::CounterFamily *samples = nullptr, *dropped = nullptr;

  void Observe(const ShadowSample& s) const {
    const std::string mode(CodecModeName(s.mode));
    const std::string rung = std::to_string(s.rung);
    kl->WithLabels({specialist, mode, rung, "first"}).value()->Observe(s.stats.first_kl);
    kl->WithLabels({specialist, mode, rung, "generated"}).value()->Observe(s.stats.mean_kl);
    top1->WithLabels({specialist, mode, rung, "first"})
        .value()
        ->Observe(s.stats.first_top1 ? 1 : 0);
    top1->WithLabels({specialist, mode, rung, "generated"})
        .value()
        ->Observe(s.stats.top1_agreement);
    for (size_t l = 0; l < s.stats.k_rel_error.size(); ++l) {
      const std::string layer = std::to_string(l);
      kv->WithLabels({specialist, mode, rung, layer, "k"}).value()->Observe(s.stats.k_rel_error[l]);
      kv->WithLabels({specialist, mode, rung, layer, "v"}).value()->Observe(s.stats.v_rel_error[l]);
    }
    samples->WithLabels({specialist, mode, rung}).value()->Increment();
  }
};

// KL in nats: 0.001 to about 16, by factors of 2.
std::vector<double> KlBuckets() { return metrics::ExponentialBuckets(0.001, 2, 15); }

}  // namespace

absl::Status AddShadowMetrics(metrics::Registry* registry, const std::string& specialist,
                              const std::vector<QualityRecord>& calibration, ShadowOptions* o) {
  auto s = std::make_shared<ShadowSeries>();
  s->specialist = specialist;
  const std::vector<std::string> labels = {"specialist", "mode", "rung"};
  SCD_ASSIGN_OR_RETURN(s->kl,
                       registry->AddHistogramFamily(
                           "scd_shadow_kl",
                           "Shadow oracle: KL(oracle || served) of a sampled request, in "
                           "nats, at the first generated position or over the generated ones.",
                           {"specialist", "mode", "rung", "tokens"}, KlBuckets()));
  SCD_ASSIGN_OR_RETURN(
      s->top1, registry->AddHistogramFamily(
                   "scd_shadow_top1_agreement",
                   "Shadow oracle: share of a sampled request's positions whose "
                   "top-1 token is the oracle's.",
                   {"specialist", "mode", "rung", "tokens"}, metrics::LinearBuckets(0.1, 0.1, 10)));
  SCD_ASSIGN_OR_RETURN(s->kv, registry->AddHistogramFamily(
                                  "scd_shadow_kv_rel_error",
                                  "Shadow oracle: relative L2 error of a layer's rebuilt K or V "
                                  "against the consumer's own, per sampled request.",
                                  {"specialist", "mode", "rung", "layer", "kv"},
                                  metrics::ExponentialBuckets(0.001, 2, 12)));
  SCD_ASSIGN_OR_RETURN(
      s->samples, registry->AddCounterFamily("scd_shadow_samples_total",
                                             "Shadow oracle: sampled requests compared.", labels));
  SCD_ASSIGN_OR_RETURN(
      s->dropped, registry->AddCounterFamily("scd_shadow_dropped_total",
                                             "Shadow oracle: sampled requests dropped, by reason "
                                             "(busy, budget, memory, preempted, error).",
                                             {"specialist", "reason"}));
  SCD_ASSIGN_OR_RETURN(auto* cal_kl, registry->AddGaugeFamily(
                                         "scd_calibration_kl",
                                         "Calibration's held-out KL(oracle || rebuilt), by mode "
                                         "and rung: the shadow KL's reference.",
                                         labels));
  SCD_ASSIGN_OR_RETURN(auto* cal_top1,
                       registry->AddGaugeFamily("scd_calibration_top1_agreement",
                                                "Calibration's held-out top-1 agreement with the "
                                                "oracle, by mode and rung.",
                                                labels));
  for (const QualityRecord& r : calibration) {
    const std::string rung = std::to_string(r.rung);
    SCD_ASSIGN_OR_RETURN(metrics::Gauge * g, cal_kl->WithLabels({specialist, r.mode, rung}));
    g->Set(r.kl);
    SCD_ASSIGN_OR_RETURN(g, cal_top1->WithLabels({specialist, r.mode, rung}));
    g->Set(r.top1);
  }
  o->on_sample = [s](const ShadowSample& sample) { s->Observe(sample); };
  o->on_drop = [s](const std::string& reason, const absl::Status& error) {
    s->dropped->WithLabels({s->specialist, reason}).value()->Increment();
    if (!error.ok()) {
      daemon::LogWarning("shadow_failed",
                         {{"specialist", s->specialist}, {"error", std::string(error.message())}});
    }
  };
  return absl::OkStatus();
}

}  // namespace scd
