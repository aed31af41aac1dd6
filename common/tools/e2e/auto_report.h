// The `auto` cells of an scd-e2e-bench run against the fixed modes: in each (bandwidth, cache)
// group, auto's TTFT p50 over that of the fastest fixed mode that meets the quality floor (its
// calibrated top-1 agreement with the oracle, from the artifact's quality record; the oracle
// always meets it), and what auto chose. The worst group's ratio is the run's
// `auto_vs_best_fixed_max`.
#ifndef SCD_COMMON_TOOLS_E2E_AUTO_REPORT_H_
#define SCD_COMMON_TOOLS_E2E_AUTO_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/scd/rate_ladder.h"
#include "common/tools/e2e/e2e_bench.h"

namespace scd::e2e {

struct AutoGroup {
  double bandwidth_gbps = 0;
  std::string cache;
  double auto_p50_ms = 0;
  std::string best_mode;  // the fastest fixed mode meeting the floor
  double best_p50_ms = 0;
  double ratio = 0;    // auto over best
  std::string chosen;  // what auto used, "scd r16/24 k3 ×20, oracle ×10"
};

// Counts of the modes used, "scd r16/24 k3 x20, oracle x10" (`times` between a name and its
// count), most used first.
std::string ChosenText(const std::map<std::string, int>& chosen, absl::string_view times = " x");

// Whether fixed mode `mode` (rung 0) meets `floor` by `quality`.
bool MeetsFloor(const std::string& mode, double floor, const std::vector<QualityRecord>& quality);

// One group per auto cell that has a fixed mode meeting the floor beside it.
std::vector<AutoGroup> CompareAuto(const std::vector<E2eCell>& cells, double floor,
                                   const std::vector<QualityRecord>& quality);

// The groups as a Markdown table, then the line "auto_vs_best_fixed_max=<x>".
std::string AutoMarkdown(const std::vector<AutoGroup>& groups);

// Which mode auto used where: one bar per group, its height the auto/best ratio, coloured by
// the mode auto used most, with a dashed line at 1.10.
absl::Status WriteAutoPlot(const std::vector<AutoGroup>& groups, const std::string& title,
                           const std::string& path);

}  // namespace scd::e2e

#endif  // SCD_COMMON_TOOLS_E2E_AUTO_REPORT_H_
