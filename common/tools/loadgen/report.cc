// Results JSON, JSONL records, the text summary and the PNGs (see report.h).
#include "common/tools/loadgen/report.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/file_io.h"
#include "common/plot/plot.h"
#include "common/plot/png_io.h"

namespace scd::loadgen {
namespace {

using nlohmann::json;

json MsOrNull(double seconds, bool present) {
  return present ? json(seconds * 1e3) : json(nullptr);
}

json OutcomeCounts(const RunStats& stats) {
  json counts = json::object();
  for (int i = 0; i < kNumOutcomes; ++i) {
    counts[OutcomeName(static_cast<Outcome>(i))] = stats.outcomes[i];
  }
  return counts;
}

// The most frequent distinct error messages, at most `limit`.
json ErrorExamples(const std::vector<RequestRecord>& records, size_t limit) {
  std::map<std::pair<std::string, std::string>, int64_t> counts;
  for (const RequestRecord& r : records) {
    if (!r.ok()) ++counts[{OutcomeName(r.outcome), r.error}];
  }
  std::vector<std::pair<int64_t, std::pair<std::string, std::string>>> sorted;
  for (const auto& [key, n] : counts) sorted.emplace_back(n, key);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  json examples = json::array();
  for (size_t i = 0; i < sorted.size() && i < limit; ++i) {
    examples.push_back({{"outcome", sorted[i].second.first},
                        {"error", sorted[i].second.second},
                        {"count", sorted[i].first}});
  }
  return examples;
}

json TimeSeriesJson(const LoadOptions& options, const RunResult& result) {
  const std::vector<IntervalStats> series = TimeSeries(result.records, options.interval_s);
  json points = json::array();
  for (size_t i = 0; i < series.size(); ++i) {
    const IntervalStats& s = series[i];
    json point{{"t_start_s", s.t_start_s},
               {"t_end_s", s.t_end_s},
               {"issued", s.issued},
               {"completed", s.completed},
               {"ok", s.ok},
               {"errors", s.errors},
               {"ttft_p50_ms", MsOrNull(s.ttft_s.p50, s.ttft_s.count > 0)},
               {"ttft_p99_ms", MsOrNull(s.ttft_s.p99, s.ttft_s.count > 0)},
               {"output_tokens_per_s", s.output_tokens / (s.t_end_s - s.t_start_s)}};
    // Samples are taken at 0, interval, 2 x interval, ... and once at the end: sample i + 1
    // is the state at this interval's end.
    if (!result.rss.empty()) {
      const RssSample& sample = result.rss[std::min(i + 1, result.rss.size() - 1)];
      point["rss_kib"] = sample.kib;
      point["client_rss_kib"] = sample.client_kib;
    }
    points.push_back(std::move(point));
  }
  json samples = json::array();
  for (const RssSample& s : result.rss) {
    samples.push_back({{"t_s", s.t_s}, {"kib", s.kib}, {"client_kib", s.client_kib}});
  }
  json out{{"interval_s", options.interval_s},
           {"rss_pids", options.rss_pids},
           {"points", std::move(points)},
           {"rss_samples", std::move(samples)}};
  if (!options.rss_labels.empty()) out["rss_labels"] = options.rss_labels;
  return out;
}

std::string Ms(const json& value) {
  return value.is_number() ? absl::StrFormat("%.1f", value.get<double>()) : "-";
}

std::string LatencyLine(const std::string& name, const json& d) {
  return absl::StrFormat("  %-8s p50 %8s  p90 %8s  p99 %8s  mean %8s  (n=%d)\n", name, Ms(d["p50"]),
                         Ms(d["p90"]), Ms(d["p99"]), Ms(d["mean"]), d["count"].get<int64_t>());
}

// Stacks canvases of equal width top to bottom.
plot::Canvas StackVertically(const std::vector<plot::Canvas>& parts) {
  int width = 0, height = 0;
  for (const plot::Canvas& c : parts) {
    width = std::max(width, c.width());
    height += c.height();
  }
  plot::Canvas out(width, height);
  int y0 = 0;
  for (const plot::Canvas& c : parts) {
    for (int y = 0; y < c.height(); ++y) {
      for (int x = 0; x < c.width(); ++x) out.SetPixel(x, y0 + y, c.GetPixel(x, y));
    }
    y0 += c.height();
  }
  return out;
}

// The report's "config": the run as configured.
json ConfigJson(const LoadOptions& options, const ReportContext& context) {
  const bool open_loop = options.rate > 0;
  return json{{"url", context.url},
              {"model", options.body.model},
              {"api", options.body.api == Api::kChat ? "chat" : "completions"},
              {"endpoint", ApiPath(options.body.api)},
              {"mode", open_loop ? "rate" : "concurrency"},
              {"rate", open_loop ? json(options.rate) : json(nullptr)},
              {"concurrency", open_loop ? json(nullptr) : json(options.concurrency)},
              {"requests", options.requests > 0 ? json(options.requests) : json(nullptr)},
              {"duration_s", options.duration_s > 0 ? json(options.duration_s) : json(nullptr)},
              {"warmup", options.warmup},
              {"max_tokens", options.body.max_tokens},
              {"prompts", context.prompts},
              {"num_prompts", context.num_prompts},
              {"timeout_s", options.client.timeout_s},
              {"seed", options.seed},
              {"shuffle", options.shuffle},
              {"interval_s", options.interval_s},
              {"extra_body", options.body.extra_body}};
}

// The report's "requests": counts by outcome and status, and a few error examples.
json RequestsJson(const RunResult& result, const RunStats& stats) {
  json http_status = json::object();
  for (const auto& [code, n] : stats.http_status) http_status[std::to_string(code)] = n;
  return json{{"issued", stats.issued},
              {"completed", static_cast<int64_t>(result.records.size())},
              {"ok", stats.ok()},
              {"failed", stats.failed()},
              {"lost", stats.issued - static_cast<int64_t>(result.records.size())},
              {"outcomes", OutcomeCounts(stats)},
              {"http_status", std::move(http_status)},
              {"error_examples", ErrorExamples(result.records, 5)},
              {"stopped_early", result.stopped}};
}

// The report's "schedule": how closely the requests followed the arrival process.
json ScheduleJson(const LoadOptions& options, const RunResult& result, const RunStats& stats,
                  const ReportContext& context) {
  const bool open_loop = options.rate > 0;
  int64_t late = 0;
  for (const RequestRecord& r : result.records) {
    if (r.lag_s() > context.late_threshold_s) ++late;
  }
  const double achieved_rate = result.issue_span_s > 0 && stats.issued > 1
                                   ? static_cast<double>(stats.issued - 1) / result.issue_span_s
                                   : 0;
  return json{{"mode", open_loop ? "poisson" : "closed_loop"},
              {"target_rate", open_loop ? json(options.rate) : json(nullptr)},
              {"achieved_rate", achieved_rate},
              {"lag_ms", DistributionJson(stats.lag_s, 1e3)},
              {"late_threshold_ms", context.late_threshold_s * 1e3},
              {"late_requests", late},
              {"fell_behind", open_loop && stats.lag_s.p99 > context.late_threshold_s},
              {"peak_in_flight", result.peak_in_flight},
              {"client_threads", result.threads_started}};
}

// The report's "ttft_drift": p99 TTFT of the first window against the last; null when short.
json DriftJson(const RunResult& result, const ReportContext& context) {
  std::optional<TtftDrift> d = ComputeTtftDrift(result.records, context.drift_window_s);
  if (!d) return nullptr;
  return json{{"window_s", d->window_s},
              {"first_p99_ms", d->first_p99_s * 1e3},
              {"last_p99_ms", d->last_p99_s * 1e3},
              {"first_count", d->first_count},
              {"last_count", d->last_count},
              {"relative_change", d->relative_change}};
}

}  // namespace

json BuildReport(const LoadOptions& options, const RunResult& result,
                 const ReportContext& context) {
  const RunStats stats = ComputeStats(result.records, context.slo);
  const RunStats warm = ComputeStats(result.warmup, Slo{});
  return json{
      {"tool", "scd-loadgen"},
      {"schema_version", 1},
      {"command", context.command},
      {"started_at", result.started_at},
      {"config", ConfigJson(options, context)},
      {"slo",
       {{"ttft_ms", context.slo.ttft_s > 0 ? json(context.slo.ttft_s * 1e3) : json(nullptr)},
        {"itl_ms", context.slo.itl_s > 0 ? json(context.slo.itl_s * 1e3) : json(nullptr)},
        {"itl_criterion", "mean inter-token latency of each request"}}},
      {"requests", RequestsJson(result, stats)},
      {"warmup", {{"issued", warm.issued}, {"ok", warm.ok()}, {"failed", warm.failed()}}},
      {"duration_s", stats.duration_s},
      {"issue_span_s", result.issue_span_s},
      {"ttft_ms", DistributionJson(stats.ttft_s, 1e3)},
      {"itl_ms", DistributionJson(stats.itl_s, 1e3)},
      {"tpot_ms", DistributionJson(stats.tpot_s, 1e3)},
      {"e2e_ms", DistributionJson(stats.e2e_s, 1e3)},
      {"throughput",
       {{"requests_per_s", stats.request_rps},
        {"output_tokens_per_s", stats.output_tokens_per_s},
        {"total_tokens_per_s", stats.total_tokens_per_s},
        {"prompt_tokens", stats.prompt_tokens},
        {"completion_tokens", stats.completion_tokens},
        {"usage_missing", stats.usage_missing}}},
      {"shed",
       {{"requests", stats.shed},
        {"fraction", stats.issued > 0 ? static_cast<double>(stats.shed) / stats.issued : 0.0},
        {"answer_ms", DistributionJson(stats.shed_answer_s, 1e3)},
        {"retry_after_s", DistributionJson(stats.retry_after_s, 1)}}},
      {"goodput",
       {{"requests_per_s", stats.goodput_rps},
        {"requests", stats.good},
        {"fraction", stats.slo_attainment}}},
      {"schedule", ScheduleJson(options, result, stats, context)},
      {"ttft_drift", DriftJson(result, context)},
      {"timeseries", TimeSeriesJson(options, result)}};
}

absl::Status WriteRecordsJsonl(const RunResult& result, const std::string& path) {
  std::string text;
  for (const auto* records : {&result.warmup, &result.records}) {
    for (const RequestRecord& r : *records) {
      text += RecordJson(r).dump(-1, ' ', false, json::error_handler_t::replace);
      text += '\n';
    }
  }
  return WriteFileAtomically(path, text);
}

std::string SummaryText(const json& report) {
  const json& req = report["requests"];
  std::string text =
      absl::StrFormat("scd-loadgen: %d requests in %.1f s: ok %d", req["issued"].get<int64_t>(),
                      report["duration_s"].get<double>(), req["ok"].get<int64_t>());
  for (const auto& [name, n] : req["outcomes"].items()) {
    if (name == "ok" || n.get<int64_t>() == 0) continue;
    absl::StrAppend(&text, ", ", name, " ", n.get<int64_t>());
  }
  if (!req["http_status"].empty()) {
    std::string codes;
    for (const auto& [code, n] : req["http_status"].items()) {
      absl::StrAppend(&codes, codes.empty() ? "" : " ", code, ":", n.get<int64_t>());
    }
    absl::StrAppend(&text, " [HTTP ", codes, "]");
  }
  text += "\n";
  text += LatencyLine("TTFT ms", report["ttft_ms"]);
  text += LatencyLine("ITL ms", report["itl_ms"]);
  text += LatencyLine("TPOT ms", report["tpot_ms"]);
  text += LatencyLine("E2E ms", report["e2e_ms"]);
  const json& tp = report["throughput"];
  const json& gp = report["goodput"];
  const json& slo = report["slo"];
  absl::StrAppendFormat(&text,
                        "  throughput %.2f req/s, %.1f output tok/s; goodput %.2f req/s "
                        "(%.1f%% of requests within SLO TTFT<=%s ms, ITL<=%s ms)\n",
                        tp["requests_per_s"].get<double>(), tp["output_tokens_per_s"].get<double>(),
                        gp["requests_per_s"].get<double>(), 100 * gp["fraction"].get<double>(),
                        Ms(slo["ttft_ms"]), Ms(slo["itl_ms"]));
  const json& shed = report["shed"];
  if (shed["requests"].get<int64_t>() > 0) {
    absl::StrAppendFormat(&text,
                          "  shed (429) %d = %.1f%% of requests, refused in p50 %s ms p99 %s ms; "
                          "Retry-After p50 %s s max %s s\n",
                          shed["requests"].get<int64_t>(), 100 * shed["fraction"].get<double>(),
                          Ms(shed["answer_ms"]["p50"]), Ms(shed["answer_ms"]["p99"]),
                          Ms(shed["retry_after_s"]["p50"]), Ms(shed["retry_after_s"]["max"]));
  }
  const json& sched = report["schedule"];
  if (sched["target_rate"].is_number()) {
    absl::StrAppendFormat(&text,
                          "  schedule: target %.2f req/s, issued at %.2f req/s, lag p99 "
                          "%s ms max %s ms, %d late%s\n",
                          sched["target_rate"].get<double>(), sched["achieved_rate"].get<double>(),
                          Ms(sched["lag_ms"]["p99"]), Ms(sched["lag_ms"]["max"]),
                          sched["late_requests"].get<int64_t>(),
                          sched["fell_behind"].get<bool>() ? " -- THE CLIENT FELL BEHIND" : "");
  }
  for (const json& e : req["error_examples"]) {
    absl::StrAppend(&text, "  ", e["count"].get<int64_t>(), " x ", e["outcome"].get<std::string>(),
                    ": ", e["error"].get<std::string>(), "\n");
  }
  return text;
}

absl::Status WriteTtftPng(const std::vector<RequestRecord>& records, const std::string& path,
                          const std::string& title) {
  std::vector<double> ttft_ms;
  for (const RequestRecord& r : records) {
    if (r.ok() && r.has_content()) ttft_ms.push_back(std::max(r.ttft_s(), 1e-6) * 1e3);
  }
  if (ttft_ms.empty()) {
    return absl::FailedPreconditionError("no successful request, so no TTFT distribution");
  }
  const Distribution d = Summarize(ttft_ms);
  const bool log_bins = d.p50 > 0 && d.p99 > 20 * d.p50;
  std::pair<double, double> range =
      log_bins ? std::make_pair(d.min, d.max) : std::make_pair(0.0, std::max(d.max, 1e-3));
  if (range.second <= range.first) range.second = range.first * 1.01 + 1e-3;
  absl::StatusOr<plot::Histogram> histogram = plot::ComputeHistogram(ttft_ms, 40, range, log_bins);
  if (!histogram.ok()) return histogram.status();
  plot::Plot p(900, 560);
  p.SetTitle(title);
  p.SetXLabel(log_bins ? "TTFT (ms, log scale)" : "TTFT (ms)");
  p.SetYLabel("requests");
  p.SetLogX(log_bins);
  p.SetLegend(plot::LegendPosition::kTopRight);
  if (absl::Status s = p.AddHistogram("", *histogram); !s.ok()) return s;
  int64_t tallest = 1;
  for (int64_t c : histogram->counts) tallest = std::max(tallest, c);
  const std::pair<const char*, double> marks[] = {{"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}};
  for (const auto& [name, value] : marks) {
    plot::SeriesOptions line;
    line.style = plot::SeriesStyle::kLine;
    if (absl::Status s = p.AddSeries(absl::StrFormat("%s %.1f ms", name, value), {value, value},
                                     {0.0, static_cast<double>(tallest)}, line);
        !s.ok()) {
      return s;
    }
  }
  return p.WritePng(path);
}

absl::Status WriteTimeSeriesPng(const json& report, const std::string& path) {
  const json& ts = report["timeseries"];
  std::vector<double> t, p50, p99;
  for (const json& point : ts["points"]) {
    if (!point["ttft_p99_ms"].is_number()) continue;
    t.push_back(0.5 * (point["t_start_s"].get<double>() + point["t_end_s"].get<double>()));
    p50.push_back(point["ttft_p50_ms"].get<double>());
    p99.push_back(point["ttft_p99_ms"].get<double>());
  }
  if (t.empty()) return absl::FailedPreconditionError("no interval with a successful request");
  const json& pids = ts["rss_pids"];
  const json& samples = ts["rss_samples"];
  double x_end = ts["points"].back()["t_end_s"].get<double>();
  if (!samples.empty()) x_end = std::max(x_end, samples.back()["t_s"].get<double>());
  std::vector<plot::Canvas> panels;
  plot::Plot latency(900, 420);
  latency.SetXRange(0, x_end);
  latency.SetTitle(absl::StrFormat("TTFT per %.0f s interval", ts["interval_s"].get<double>()));
  latency.SetXLabel("time since start (s)");
  latency.SetYLabel("TTFT (ms)");
  if (absl::Status s = latency.AddSeries("p50", t, p50); !s.ok()) return s;
  if (absl::Status s = latency.AddSeries("p99", t, std::move(p99)); !s.ok()) return s;
  absl::StatusOr<plot::Canvas> top = latency.Render();
  if (!top.ok()) return top.status();
  panels.push_back(std::move(*top));

  if (!pids.empty() && !samples.empty()) {
    plot::Plot memory(900, 380);
    memory.SetTitle("resident set size");
    memory.SetXLabel("time since start (s)");
    memory.SetYLabel("RSS (MiB)");
    for (size_t i = 0; i < pids.size(); ++i) {
      std::vector<double> st, mib;
      for (const json& s : samples) {
        const int64_t kib = s["kib"][i].get<int64_t>();
        if (kib < 0) continue;
        st.push_back(s["t_s"].get<double>());
        mib.push_back(static_cast<double>(kib) / 1024.0);
      }
      if (st.empty()) continue;
      const bool labelled = ts.contains("rss_labels") && ts["rss_labels"].is_array() &&
                            ts["rss_labels"].size() == pids.size() &&
                            ts["rss_labels"][i].is_string();
      const std::string name = labelled ? absl::StrCat(ts["rss_labels"][i].get<std::string>(),
                                                       " (pid ", pids[i].get<int>(), ")")
                                        : absl::StrCat("pid ", pids[i].get<int>());
      if (absl::Status s = memory.AddSeries(name, std::move(st), std::move(mib)); !s.ok()) {
        return s;
      }
    }
    if (memory.num_series() > 0) {
      memory.SetXRange(0, x_end);
      absl::StatusOr<plot::Canvas> bottom = memory.Render();
      if (!bottom.ok()) return bottom.status();
      panels.push_back(std::move(*bottom));
    }
  }
  return plot::WritePng(path, StackVertically(panels));
}

}  // namespace scd::loadgen
