// A link that changes while the daemons serve: scd-e2e-bench --link-steps runs `mode: auto`
// (prefix cache on) over a sequence of emulated bandwidths, each held for some seconds, and
// changes the prefill daemon's link between them through the Admin API (SetLinkBandwidth), so
// that nothing restarts. Requests go one at a time over the shared-prefix workload, cycling;
// each is recorded with the mode it was given and its TTFT.
//
// A step's settled mode is the mode (rung aside) used most in its second half; the step's
// switch time is how long after the change the requests took to settle: the first of five in a
// row in the settled mode (of all, in a step with fewer answered requests). The report ends with
// `link_switch_seconds_max=<x>`, the slowest switch among the steps whose settled mode differs from
// the step before's.
#ifndef SCD_COMMON_TOOLS_E2E_LINK_STEPS_H_
#define SCD_COMMON_TOOLS_E2E_LINK_STEPS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::e2e {

struct LinkStep {
  double gbps = 0;
  double seconds = 0;
};

// "100:40,0.1:40,10:40" (Gbit/s:seconds, comma-separated) to steps; INVALID_ARGUMENT naming the
// bad item.
absl::StatusOr<std::vector<LinkStep>> ParseLinkSteps(const std::string& text);

struct LinkSample {
  double t_seconds = 0;  // when the request was sent, from the first step's start
  int step = 0;
  bool ok = false;
  std::string mode;       // "scd", "raw", ...
  std::string rung_name;  // "scd r18/24 k3" (the mode for modes without rungs)
  double ttft_ms = 0;
  double transfer_ms = 0;
  double payload_bytes = 0;
};

struct LinkStepSummary {
  LinkStep step;
  double start_seconds = 0;
  int requests = 0, errors = 0;
  std::string settled_mode;    // empty when the step had no answered request
  bool changed = false;        // settled_mode differs from the step before's
  double switch_seconds = -1;  // negative: never settled
  double ttft_p50_ms = 0;      // over the step's second half
  std::string chosen;          // "raw ×120, quant4 ×3"
};

std::vector<LinkStepSummary> SummarizeLinkSteps(const std::vector<LinkStep>& steps,
                                                const std::vector<LinkSample>& samples);
// The summaries as a Markdown table, then "link_switch_seconds_max=<x>" (0 when no step
// changed the mode; "inf" when one never settled).
std::string LinkStepsMarkdown(const std::vector<LinkStepSummary>& steps);
// {"steps": [...], "samples": {"t": [...], "mode": [...], ...}}: the samples one array per field.
nlohmann::json LinkStepsJson(const std::vector<LinkStepSummary>& steps,
                             const std::vector<LinkSample>& samples);
// TTFT against time, one marker series per mode, a vertical line at each change.
absl::Status WriteLinkStepsPlot(const std::vector<LinkStepSummary>& steps,
                                const std::vector<LinkSample>& samples, const std::string& title,
                                const std::string& path);

}  // namespace scd::e2e

#endif  // SCD_COMMON_TOOLS_E2E_LINK_STEPS_H_
