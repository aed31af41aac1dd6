// The shadow oracle's series on the decode daemon's /metrics (common/serving/shadow_oracle.h),
// labelled by specialist (the daemon's model name), mode and rung (the rate ladder's, 0 for the
// other modes):
//   scd_shadow_kl{tokens}                KL(oracle ‖ served) per sample: tokens="first", the
//                                        first generated position; "generated", the mean over
//                                        the first quality.shadow_tokens
//   scd_shadow_top1_agreement{tokens}    likewise, top-1 agreement (0 or 1 for "first")
//   scd_shadow_kv_rel_error{layer, kv}   per layer, ‖rebuilt − own‖ / ‖own‖ of K or V
//   scd_shadow_samples_total             samples compared
//   scd_shadow_dropped_total{reason}     samples dropped (busy, budget, memory, preempted,
//                                        error); labelled by specialist only
// and, beside them, the calibration's held-out figures for every mode and rung of the
// artifact's record, so that drift reads as a ratio:
//   scd_calibration_kl, scd_calibration_top1_agreement
// A sample dropped for an error is logged (shadow_failed).
#ifndef SCD_DECODE_SERVER_SHADOW_METRICS_H_
#define SCD_DECODE_SERVER_SHADOW_METRICS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics/registry.h"
#include "common/scd/rate_ladder.h"
#include "common/serving/shadow_oracle.h"

namespace scd {

// Registers the series and sets o->on_sample and o->on_drop to fill them.
absl::Status AddShadowMetrics(metrics::Registry* registry, const std::string& specialist,
                              const std::vector<QualityRecord>& calibration, ShadowOptions* o);

}  // namespace scd

#endif  // SCD_DECODE_SERVER_SHADOW_METRICS_H_
