// See auto_report.h.
#include "common/tools/e2e/auto_report.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/plot/plot.h"

namespace scd::e2e {

bool MeetsFloor(const std::string& mode, double floor, const std::vector<QualityRecord>& quality) {
  if (mode == "oracle") return true;
  for (const QualityRecord& q : quality) {
    if (q.mode == mode && q.rung == 0) return q.top1 >= floor;
  }
  return false;  // no record: not known to meet it
}

std::string ChosenText(const std::map<std::string, int>& chosen, absl::string_view times) {
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [name, n] : chosen) by_count.push_back({-n, name});
  std::sort(by_count.begin(), by_count.end());
  std::string out;
  for (const auto& [n, name] : by_count)
    absl::StrAppend(&out, out.empty() ? "" : ", ", name, times, -n);
  return out;
}

std::vector<AutoGroup> CompareAuto(const std::vector<E2eCell>& cells, double floor,
                                   const std::vector<QualityRecord>& quality) {
  std::vector<AutoGroup> groups;
  for (const E2eCell& a : cells) {
    if (a.mode != "auto" || a.requests == 0) continue;
    AutoGroup g;
    g.bandwidth_gbps = a.bandwidth_gbps;
    g.cache = a.cache;
    g.auto_p50_ms = a.ttft_p50_ms;
    g.chosen = ChosenText(a.chosen);
    for (const E2eCell& f : cells) {
      if (f.mode == "auto" || f.bandwidth_gbps != a.bandwidth_gbps || f.cache != a.cache ||
          f.requests == 0 || !MeetsFloor(f.mode, floor, quality)) {
        continue;
      }
      if (g.best_mode.empty() || f.ttft_p50_ms < g.best_p50_ms) {
        g.best_mode = f.mode;
        g.best_p50_ms = f.ttft_p50_ms;
      }
    }
    if (g.best_mode.empty() || g.best_p50_ms <= 0) continue;
    g.ratio = g.auto_p50_ms / g.best_p50_ms;
    groups.push_back(g);
  }
  return groups;
}

std::string AutoMarkdown(const std::vector<AutoGroup>& groups) {
  std::string md =
      "| Gbit/s | cache | auto TTFT p50 ms | best fixed mode at the floor | its p50 ms | auto / "
      "best | "
      "auto chose |\n|---|---|---|---|---|---|---|\n";
  double worst = 0;
  for (const AutoGroup& g : groups) {
    absl::StrAppendFormat(&md, "| %g | %s | %.1f | %s | %.1f | %.2f | %s |\n", g.bandwidth_gbps,
                          g.cache, g.auto_p50_ms, g.best_mode, g.best_p50_ms, g.ratio, g.chosen);
    worst = std::max(worst, g.ratio);
  }
  absl::StrAppendFormat(&md, "\nauto_vs_best_fixed_max=%.3f\n", worst);
  return md;
}

absl::Status WriteAutoPlot(const std::vector<AutoGroup>& groups, const std::string& title,
                           const std::string& path) {
  plot::Plot p(900, 560);
  p.SetTitle(title);
  p.SetXLabel("cell (bandwidth Gbit/s, cache), in the table's order");
  p.SetYLabel("auto TTFT p50 / best fixed mode's");
  // One series per mode auto used most in a cell, so that the legend names it.
  std::map<std::string, std::vector<size_t>> by_mode;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string& chosen = groups[i].chosen;
    by_mode[chosen.substr(0, chosen.find(" x"))].push_back(i);
  }
  for (const auto& [mode, indices] : by_mode) {
    std::vector<double> lefts, rights, heights;
    for (size_t i : indices) {
      lefts.push_back(i + 0.1);
      rights.push_back(i + 0.9);
      heights.push_back(groups[i].ratio);
    }
    if (absl::Status st = p.AddBars(mode, lefts, rights, heights); !st.ok()) return st;
  }
  const double right = std::max<double>(1, groups.size());
  plot::SeriesOptions dashed;
  dashed.style = plot::SeriesStyle::kLine;
  dashed.color = plot::Color{200, 0, 0};
  if (absl::Status st = p.AddSeries("target 1.10", {0, right}, {1.1, 1.1}, dashed); !st.ok()) {
    return st;
  }
  p.SetYRange(0, 1.5);
  return p.WritePng(path);
}

}  // namespace scd::e2e
