// See link_steps.h.
#include "common/tools/e2e/link_steps.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/plot/plot.h"
#include "common/tools/e2e/auto_report.h"
#include "common/tools/loadgen/stats.h"
#include "common/transport/bandwidth_limiter.h"

namespace scd::e2e {
namespace {

constexpr int kSettledRun = 5;  // requests in a row in the settled mode

// The most frequent value; ties go to the first seen.
std::string MostFrequent(const std::vector<std::string>& values) {
  std::map<std::string, int> counts;
  std::string best;
  for (const std::string& v : values) {
    if (++counts[v] > counts[best] || best.empty()) best = v;
  }
  return best;
}

// "raw ×120, quant4 ×3", most used first.
std::string Chosen(const std::vector<const LinkSample*>& samples) {
  std::map<std::string, int> counts;
  for (const LinkSample* s : samples) ++counts[s->rung_name];
  return ChosenText(counts, " ×");
}

// Seconds from the step's start to the first of kSettledRun answered requests in a row in
// `mode` (all of them, in a step with fewer); negative when there is none.
double SwitchSeconds(const std::vector<const LinkSample*>& answered, const std::string& mode,
                     double start) {
  const size_t need = std::min<size_t>(kSettledRun, answered.size());
  for (size_t i = 0; i + need <= answered.size(); ++i) {
    size_t n = 0;
    while (n < need && answered[i + n]->mode == mode) ++n;
    if (n == need) return answered[i]->t_seconds - start;
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::vector<LinkStep>> ParseLinkSteps(const std::string& text) {
  std::vector<LinkStep> steps;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    LinkStep s;
    if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &s.gbps) ||
        !absl::SimpleAtod(parts[1], &s.seconds) || !transport::CheckBandwidthGbps(s.gbps).ok() ||
        !(s.seconds > 0 && s.seconds <= 3600)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--link-steps takes GBPS:SECONDS items (Gbit/s in [0, ", transport::kMaxBandwidthGbps,
          "], 0 = unlimited; seconds in (0, 3600]), comma-separated, not \"", item, "\""));
    }
    steps.push_back(s);
  }
  if (steps.empty()) return absl::InvalidArgumentError("--link-steps names no step");
  return steps;
}

std::vector<LinkStepSummary> SummarizeLinkSteps(const std::vector<LinkStep>& steps,
                                                const std::vector<LinkSample>& samples) {
  std::vector<LinkStepSummary> out;
  double start = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    LinkStepSummary s;
    s.step = steps[k];
    s.start_seconds = start;
    std::vector<const LinkSample*> answered, late;
    for (const LinkSample& x : samples) {
      if (x.step != static_cast<int>(k)) continue;
      ++s.requests;
      if (!x.ok) {
        ++s.errors;
        continue;
      }
      answered.push_back(&x);
      if (x.t_seconds >= start + s.step.seconds / 2) late.push_back(&x);
    }
    if (late.empty()) late = answered;
    std::vector<std::string> modes;
    std::vector<double> ttfts;
    for (const LinkSample* x : late) {
      modes.push_back(x->mode);
      ttfts.push_back(x->ttft_ms);
    }
    s.settled_mode = MostFrequent(modes);
    s.changed = k > 0 && !s.settled_mode.empty() && s.settled_mode != out.back().settled_mode;
    if (!s.settled_mode.empty()) s.switch_seconds = SwitchSeconds(answered, s.settled_mode, start);
    s.ttft_p50_ms = loadgen::Summarize(ttfts).p50;
    s.chosen = Chosen(answered);
    out.push_back(s);
    start += s.step.seconds;
  }
  return out;
}

std::string LinkStepsMarkdown(const std::vector<LinkStepSummary>& steps) {
  std::string md =
      "| from (s) | link Gbit/s | requests | errors | settled mode | changed | switch (s) | "
      "TTFT p50, second half (ms) | chosen |\n|---|---|---|---|---|---|---|---|---|\n";
  double worst = 0;
  for (const LinkStepSummary& s : steps) {
    const std::string sw =
        s.switch_seconds < 0 ? "never" : absl::StrFormat("%.2f", s.switch_seconds);
    absl::StrAppendFormat(&md, "| %.0f | %s | %d | %d | %s | %s | %s | %.1f | %s |\n",
                          s.start_seconds,
                          s.step.gbps == 0 ? "unlimited" : absl::StrFormat("%g", s.step.gbps),
                          s.requests, s.errors, s.settled_mode.empty() ? "-" : s.settled_mode,
                          s.changed ? "yes" : "no", sw, s.ttft_p50_ms, s.chosen);
    if (s.changed) worst = std::max(worst, s.switch_seconds < 0 ? INFINITY : s.switch_seconds);
  }
  absl::StrAppend(&md, "\nlink_switch_seconds_max=",
                  std::isinf(worst) ? "inf" : absl::StrFormat("%.2f", worst), "\n");
  return md;
}

nlohmann::json LinkStepsJson(const std::vector<LinkStepSummary>& steps,
                             const std::vector<LinkSample>& samples) {
  nlohmann::json j;
  j["steps"] = nlohmann::json::array();
  for (const LinkStepSummary& s : steps) {
    j["steps"].push_back({{"gbps", s.step.gbps},
                          {"seconds", s.step.seconds},
                          {"start_seconds", s.start_seconds},
                          {"requests", s.requests},
                          {"errors", s.errors},
                          {"settled_mode", s.settled_mode},
                          {"changed", s.changed},
                          {"switch_seconds", s.switch_seconds},
                          {"ttft_p50_ms_second_half", s.ttft_p50_ms},
                          {"chosen", s.chosen}});
  }
  // Thousands of requests: one array per field, times to the microsecond.
  auto micro = [](double v) { return std::round(v * 1e3) / 1e3; };
  nlohmann::json& c = j["samples"];
  for (const char* key :
       {"t", "step", "ok", "mode", "rung_name", "ttft_ms", "transfer_ms", "payload_bytes"}) {
    c[key] = nlohmann::json::array();
  }
  for (const LinkSample& x : samples) {
    c["t"].push_back(micro(x.t_seconds));
    c["step"].push_back(x.step);
    c["ok"].push_back(x.ok);
    c["mode"].push_back(x.mode);
    c["rung_name"].push_back(x.rung_name);
    c["ttft_ms"].push_back(micro(x.ttft_ms));
    c["transfer_ms"].push_back(micro(x.transfer_ms));
    c["payload_bytes"].push_back(x.payload_bytes);
  }
  return j;
}

absl::Status WriteLinkStepsPlot(const std::vector<LinkStepSummary>& steps,
                                const std::vector<LinkSample>& samples, const std::string& title,
                                const std::string& path) {
  plot::Plot p(1000, 600);
  p.SetTitle(title);
  p.SetXLabel("seconds (link Gbit/s per step in the legend's last rows)");
  p.SetYLabel("TTFT (ms)");
  std::vector<double> ttfts;
  for (const LinkSample& x : samples) {
    if (x.ok) ttfts.push_back(x.ttft_ms);
  }
  // The 99th percentile tops the axis: a few slow requests would flatten the rest.
  const double top = std::max(1.0, loadgen::Summarize(ttfts).p99 * 1.2);
  p.SetYRange(0, top);
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_mode;
  for (const LinkSample& x : samples) {
    if (!x.ok) continue;
    auto& [xs, ys] = by_mode[x.mode];
    xs.push_back(x.t_seconds);
    ys.push_back(std::min(x.ttft_ms, top));
  }
  plot::SeriesOptions markers;
  markers.style = plot::SeriesStyle::kMarkers;
  markers.marker_radius = 2;
  for (auto& [mode, xy] : by_mode) {
    if (absl::Status st = p.AddSeries(mode, xy.first, xy.second, markers); !st.ok()) return st;
  }
  plot::SeriesOptions line;
  line.style = plot::SeriesStyle::kLine;
  line.line_width = 1;
  line.color = plot::Color{90, 90, 90};
  for (const LinkStepSummary& s : steps) {
    const std::string name = absl::StrCat(
        "from ", static_cast<int>(s.start_seconds), " s: ",
        s.step.gbps == 0 ? std::string("unlimited") : absl::StrFormat("%g Gbit/s", s.step.gbps));
    if (absl::Status st = p.AddSeries(name, {s.start_seconds, s.start_seconds}, {0, top}, line);
        !st.ok()) {
      return st;
    }
  }
  return p.WritePng(path);
}

}  // namespace scd::e2e
