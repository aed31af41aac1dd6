// See soak.h.
#include "common/tools/e2e/soak.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tools/cluster/daemon_process.h"
#include "common/tools/cluster/local_cluster.h"
#include "common/tools/loadgen/report.h"
#include "common/tools/loadgen/runner.h"

namespace scd::e2e {
namespace {

constexpr char kToken[] = "soak-token";

using SoakCluster = cluster::LocalPair;

nlohmann::json PrefillJson(const SoakOptions& o) {
  nlohmann::json c;
  c["base_model"] = o.base_model;
  c["http"] = {{"port", 0}};
  c["control_plane"] = {{"cluster_token", kToken}};
  c["data_plane"] = {{"transport", "tcp"}};
  c["prefix_cache"] = {{"enabled", true}};
  c["limits"] = {
      {"max_tokens", 256}, {"default_max_tokens", o.max_tokens}, {"request_timeout", "120s"}};
  c["drain_timeout"] = "10s";
  c["specialists"] = nlohmann::json::array({{{"name", o.specialist_name},
                                             {"artifact", o.artifact},
                                             {"consumer_path", o.specialist_model},
                                             {"mode", o.mode}}});
  return c;
}

absl::Status StartCluster(const SoakOptions& o, SoakCluster& c) {
  cluster::DecodeDaemonSpec spec;
  spec.model_name = o.specialist_name;
  spec.model_path = o.specialist_model;
  spec.artifact = o.artifact;
  spec.cluster_token = kToken;
  spec.extra["http"] = {{"port", 0}};  // /metrics: the shadow oracle's counts
  if (o.shadow_rate >= 0) spec.extra["quality"]["shadow_rate"] = o.shadow_rate;
  if (o.shadow_piece_tokens > 0)
    spec.extra["quality"]["shadow_piece_tokens"] = o.shadow_piece_tokens;
  if (o.shadow_max_tokens_per_s > 0) {
    spec.extra["quality"]["shadow_max_tokens_per_s"] = o.shadow_max_tokens_per_s;
  }
  absl::StatusOr<cluster::LocalPair> pair =
      cluster::StartLocalPair(o.bin_dir, PrefillJson(o), spec, o.decode_daemons, o.workdir);
  if (!pair.ok()) return pair.status();
  c = *std::move(pair);
  return absl::OkStatus();
}

loadgen::LoadOptions BaseLoad(const SoakOptions& o, int http_port) {
  loadgen::LoadOptions load =
      loadgen::GreedyCompletionLoad(http_port, o.specialist_name, o.max_tokens);
  load.interval_s = o.interval_s;
  return load;
}

std::string Fmt(double v, int digits = 1) { return absl::StrFormat("%.*f", digits, v); }

// Runs one saturation level or probe and summarises it.
absl::StatusOr<SaturationLevel> MeasureLevel(const loadgen::LoadOptions& load,
                                             const std::vector<loadgen::Prompt>& prompts) {
  absl::StatusOr<loadgen::RunResult> run = loadgen::RunLoad(load, prompts);
  if (!run.ok()) return run.status();
  const nlohmann::json report = loadgen::BuildReport(load, *run, loadgen::ReportContext());
  SaturationLevel level;
  level.ok = report["requests"]["ok"].get<int64_t>();
  level.failed = report["requests"]["failed"].get<int64_t>();
  level.requests_per_s = report["throughput"]["requests_per_s"].get<double>();
  if (!report["ttft_ms"]["p50"].is_null()) {
    level.ttft_p50_ms = report["ttft_ms"]["p50"].get<double>();
    level.ttft_p99_ms = report["ttft_ms"]["p99"].get<double>();
  }
  return level;
}

// Checks that every request issued succeeded, with error examples when some failed.
SoakCheck RequestsCheck(const nlohmann::json& report) {
  const nlohmann::json& r = report["requests"];
  const int64_t issued = r["issued"].get<int64_t>(), failed = r["failed"].get<int64_t>(),
                lost = r["lost"].get<int64_t>();
  SoakCheck c{"zero failed or lost requests", failed == 0 && lost == 0 && issued > 0,
              absl::StrCat(issued, " issued, ", r["ok"].get<int64_t>(), " ok, ", failed,
                           " failed, ", lost, " lost")};
  if (failed > 0 && r.contains("error_examples")) {
    c.detail += absl::StrCat("; e.g. ", report["requests"]["error_examples"].dump());
  }
  return c;
}

// Checks that no daemon exited during the run, naming those that did.
SoakCheck AliveCheck(const std::vector<std::string>& daemons, const std::vector<bool>& alive) {
  int dead = 0;
  std::string names;
  for (size_t i = 0; i < alive.size(); ++i) {
    if (!alive[i]) absl::StrAppend(&names, names.empty() ? "" : ", ", daemons[i]), ++dead;
  }
  return {"every daemon still running", dead == 0,
          dead == 0 ? absl::StrCat(alive.size(), " of ", alive.size(), " running")
                    : absl::StrCat("exited: ", names)};
}

// The median of `v` (non-empty).
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The medians of daemon `d`'s RSS samples after the warm-up, one per non-empty drift window;
// `peak` receives the largest single sample.
std::vector<double> RssWindowMedians(const SoakOptions& o, const nlohmann::json& samples, size_t d,
                                     double& peak) {
  std::vector<std::vector<double>> windows;
  peak = 0;
  for (const nlohmann::json& s : samples) {
    const double t = s["t_s"].get<double>();
    const double kib = s["kib"][d].get<double>();
    if (t < o.rss_warmup_s || kib <= 0) continue;
    const size_t w = static_cast<size_t>((t - o.rss_warmup_s) / o.drift_window_s);
    if (windows.size() <= w) windows.resize(w + 1);
    windows[w].push_back(kib);
    peak = std::max(peak, kib);
  }
  std::vector<double> medians;
  for (const std::vector<double>& w : windows) {
    if (!w.empty()) medians.push_back(Median(w));
  }
  return medians;
}

// Checks that each daemon's RSS stays flat after the warm-up.
SoakCheck RssCheck(const SoakOptions& o, const nlohmann::json& report,
                   const std::vector<std::string>& daemons) {
  // Per daemon, over the samples after the warm-up, in windows of drift_window_s: the
  // median of each window against the first window's median. Medians, because under
  // Poisson load a single sample also measures how many requests happen to be in flight
  // (each holds its KV and activations until it ends); a leak moves every window. The
  // largest single-sample excursion is reported alongside, not judged.
  const nlohmann::json& samples = report["timeseries"]["rss_samples"];
  bool ok = !daemons.empty();
  std::string detail;
  for (size_t d = 0; d < daemons.size(); ++d) {
    double peak = 0;
    const std::vector<double> medians = RssWindowMedians(o, samples, d, peak);
    if (medians.size() < 2) {
      ok = false;
      absl::StrAppend(&detail, detail.empty() ? "" : "; ", daemons[d],
                      ": fewer than two windows after the warm-up");
      continue;
    }
    const double ref = medians.front();
    double worst = 0;
    for (double m : medians) worst = std::max(worst, std::abs(m - ref) / ref);
    ok = ok && worst <= o.rss_tolerance;
    absl::StrAppend(&detail, detail.empty() ? "" : "; ", daemons[d], ": ", Fmt(ref / 1024), " -> ",
                    Fmt(medians.back() / 1024), " MiB, worst window ", Fmt(100 * worst, 2), "% (",
                    medians.size(), " windows; peak sample ", Fmt(peak / 1024), " MiB)");
  }
  return {
      absl::StrCat("RSS flat within ", Fmt(100 * o.rss_tolerance, 0), "% after ",
                   Fmt(o.rss_warmup_s, 0), " s (", Fmt(o.drift_window_s, 0), "-s window medians)"),
      ok, detail};
}

// Checks that p99 TTFT did not rise between the first and the last window by more than the
// tolerance. One-sided: only a rise is drift (a fall, say from a warmer cache, passes), and
// the output says how the bound compares with the noise (soak.h): a single run's
// first-vs-last p99 moves by about the bound from noise alone on a small host.
SoakCheck TtftDriftCheck(const SoakOptions& o, const nlohmann::json& report) {
  const nlohmann::json& drift = report["ttft_drift"];
  if (drift.is_null()) return {"p99 TTFT drift", false, "no drift figure (too few requests)"};
  const double change = drift["relative_change"].get<double>();
  const std::string bound = Fmt(100 * o.ttft_drift_tolerance, 0);
  return {absl::StrCat("p99 TTFT drift: rise below ", bound, "% (first vs last ",
                       Fmt(o.drift_window_s, 0), " s; a fall passes)"),
          change < o.ttft_drift_tolerance,
          absl::StrCat(Fmt(drift["first_p99_ms"].get<double>()), " ms -> ",
                       Fmt(drift["last_p99_ms"].get<double>()), " ms (", change >= 0 ? "+" : "",
                       Fmt(100 * change, 1), "%; ", drift["first_count"].get<int64_t>(), " and ",
                       drift["last_count"].get<int64_t>(), " requests); the +", bound,
                       "% bound is about the run-to-run noise of a one-window p99 on a 2-core "
                       "host (docs/RESULTS.md, Soak): rerun before reading a narrow failure as "
                       "drift")};
}

// Raises closed-loop concurrency until throughput stops growing by 5%; records the best rate.
absl::Status SweepConcurrency(const SoakOptions& o, const SoakCluster& c,
                              const SoakProgressFn& progress, SoakResult& result) {
  for (int concurrency : o.saturation_concurrency) {
    loadgen::LoadOptions load = BaseLoad(o, c.http_port);
    load.concurrency = concurrency;
    load.duration_s = o.saturation_level_s;
    load.warmup = concurrency;
    absl::StatusOr<SaturationLevel> measured = MeasureLevel(load, o.prompts);
    if (!measured.ok()) return measured.status();
    SaturationLevel level = *measured;
    level.concurrency = concurrency;
    progress(absl::StrCat("saturation: concurrency ", concurrency, ": ",
                          Fmt(level.requests_per_s, 2), " req/s, TTFT p50 ", Fmt(level.ttft_p50_ms),
                          " ms, p99 ", Fmt(level.ttft_p99_ms), " ms, ", level.failed, " failed"));
    const double best = result.saturation_rate;
    result.saturation.push_back(level);
    result.saturation_rate = std::max(best, level.requests_per_s);
    if (best > 0 && level.requests_per_s < 1.05 * best) break;
  }
  return absl::OkStatus();
}

// Steps open-loop Poisson rates up from half the closed-loop rate until the cluster falls
// behind; the saturation rate becomes the last rate it kept up with (see soak.h).
absl::Status ProbeOpenLoop(const SoakOptions& o, const SoakCluster& c,
                           const SoakProgressFn& progress, SoakResult& result) {
  const double closed_loop = result.saturation_rate;
  double first_p50 = 0, sustained = 0, first_achieved = 0;
  for (double rate = 0.5 * closed_loop; rate <= 1.05 * closed_loop; rate *= 1.15) {
    loadgen::LoadOptions probe = BaseLoad(o, c.http_port);
    probe.rate = rate;
    probe.duration_s = o.probe_s;
    absl::StatusOr<SaturationLevel> measured = MeasureLevel(probe, o.prompts);
    if (!measured.ok()) return measured.status();
    SaturationLevel level = *measured;
    level.rate_asked = rate;
    if (first_p50 == 0) {
      first_p50 = level.ttft_p50_ms;
      first_achieved = level.requests_per_s;
    }
    level.kept_up = level.failed == 0 && level.requests_per_s >= 0.95 * rate &&
                    level.ttft_p50_ms <= 3 * first_p50;
    progress(absl::StrCat("saturation: open loop ", Fmt(rate, 2),
                          " req/s asked: ", Fmt(level.requests_per_s, 2), " completed/s, TTFT p50 ",
                          Fmt(level.ttft_p50_ms), " ms, p99 ", Fmt(level.ttft_p99_ms), " ms, ",
                          level.failed, " failed: ", level.kept_up ? "kept up" : "fell behind"));
    result.saturation.push_back(level);
    if (!level.kept_up) break;
    sustained = rate;
  }
  // When even the first probe fell behind, what it completed is the best estimate.
  result.saturation_rate = sustained > 0 ? sustained : first_achieved;
  return absl::OkStatus();
}

// Runs the soak load itself at the configured fraction of the saturation rate, sampling every
// daemon's RSS, and stores the daemons' names and the load report in `result`.
absl::Status RunSoakLoad(const SoakOptions& o, const SoakCluster& c, const SoakProgressFn& progress,
                         SoakResult& result) {
  result.soak_rate = o.load_fraction * result.saturation_rate;
  loadgen::LoadOptions load = BaseLoad(o, c.http_port);
  load.rate = result.soak_rate;
  load.duration_s = o.duration_s;
  load.warmup = o.warmup_requests;
  load.rss_pids.push_back(c.prefill->pid());
  result.daemons.push_back("prefill");
  for (size_t i = 0; i < c.decodes.size(); ++i) {
    load.rss_pids.push_back(c.decodes[i]->pid());
    result.daemons.push_back(absl::StrCat("decode-", i));
  }
  load.rss_labels = result.daemons;
  progress(absl::StrCat("soak: Poisson arrivals at ", Fmt(result.soak_rate, 2), " req/s (",
                        Fmt(100 * o.load_fraction, 0), "% of ", Fmt(result.saturation_rate, 2),
                        ") for ", Fmt(o.duration_s, 0), " s"));
  absl::StatusOr<loadgen::RunResult> run = loadgen::RunLoad(
      load, o.prompts, [&](const loadgen::Progress& p) { progress(loadgen::FormatProgress(p)); });
  if (!run.ok()) return run.status();
  loadgen::ReportContext context;
  context.url = load.client.target.base;
  context.prompts = "bAbI shared-prefix workload";
  context.num_prompts = static_cast<int>(o.prompts.size());
  context.drift_window_s = o.drift_window_s;
  result.report = loadgen::BuildReport(load, *run, context);
  return absl::OkStatus();
}

// The shadow oracle's samples and drops, summed over the decode daemons' /metrics.
absl::Status CountShadow(const SoakCluster& c, SoakResult& result) {
  for (const auto& d : c.decodes) {
    absl::StatusOr<nlohmann::json> started =
        d->WaitForEvent("decode_started", std::chrono::seconds(5));
    if (!started.ok()) return started.status();
    absl::StatusOr<std::string> m = cluster::ScrapeMetrics(started->value("http_port", -1));
    if (!m.ok()) return m.status();
    result.shadow_samples += cluster::SumMetric(*m, "scd_shadow_samples_total");
    result.shadow_dropped += cluster::SumMetric(*m, "scd_shadow_dropped_total");
  }
  return absl::OkStatus();
}

// Stops every daemon with SIGTERM, decode daemons first (the prefill daemon is their peer),
// and checks that each exits 0.
SoakCheck StopCluster(SoakCluster& c, const std::vector<std::string>& daemons) {
  std::string exits;
  bool clean = true;
  auto stop = [&](cluster::DaemonProcess& d, const std::string& name) {
    const std::optional<int> code = d.Stop(std::chrono::seconds(30));
    clean = clean && code.has_value() && *code == 0;
    absl::StrAppend(&exits, exits.empty() ? "" : ", ", name, " ",
                    code.has_value() ? absl::StrCat(*code) : "hung");
  };
  for (size_t i = 0; i < c.decodes.size(); ++i) stop(*c.decodes[i], daemons[i + 1]);
  stop(*c.prefill, "prefill");
  return {"SIGTERM: every daemon exits 0", clean, exits};
}

}  // namespace

std::vector<SoakCheck> EvaluateSoak(const SoakOptions& o, const nlohmann::json& report,
                                    const std::vector<std::string>& daemons,
                                    const std::vector<bool>& alive) {
  std::vector<SoakCheck> checks;
  checks.push_back(RequestsCheck(report));
  checks.push_back(AliveCheck(daemons, alive));
  checks.push_back(RssCheck(o, report, daemons));
  checks.push_back(TtftDriftCheck(o, report));
  return checks;
}

absl::StatusOr<SoakResult> RunSoak(const SoakOptions& o, const SoakProgressFn& progress) {
  if (o.prompts.empty()) return absl::InvalidArgumentError("soak: no prompts");
  if (!(o.load_fraction > 0 && o.load_fraction <= 1)) {
    return absl::InvalidArgumentError("soak: load fraction must be in (0, 1]");
  }
  SoakCluster c;
  if (absl::Status s = StartCluster(o, c); !s.ok()) return s;
  progress(absl::StrCat("soak: 1 prefill daemon (pid ", c.prefill->pid(), ", HTTP port ",
                        c.http_port, ") and ", c.decodes.size(), " decode daemons registered"));

  SoakResult result;
  if (o.saturation_rate > 0) {
    result.saturation_rate = o.saturation_rate;
  } else {
    if (absl::Status s = SweepConcurrency(o, c, progress, result); !s.ok()) return s;
    if (!(result.saturation_rate > 0)) {
      return absl::FailedPreconditionError("soak: no request succeeded in the saturation sweep");
    }
    if (absl::Status s = ProbeOpenLoop(o, c, progress, result); !s.ok()) return s;
  }
  if (absl::Status s = RunSoakLoad(o, c, progress, result); !s.ok()) return s;
  if (absl::Status s = CountShadow(c, result); !s.ok()) return s;

  std::vector<bool> alive = {c.prefill->running()};
  for (auto& d : c.decodes) alive.push_back(d->running());
  result.checks = EvaluateSoak(o, result.report, result.daemons, alive);
  result.checks.push_back(StopCluster(c, result.daemons));

  result.passed = std::all_of(result.checks.begin(), result.checks.end(),
                              [](const SoakCheck& check) { return check.passed; });
  return result;
}

nlohmann::json SoakResultJson(const SoakOptions& o, const SoakResult& r) {
  nlohmann::json j;
  j["mode"] = o.mode;
  // The daemons inherit the environment; OpenBLAS's thread count changes how three processes
  // share the cores, so it belongs with the figures.
  const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");
  j["env_openblas_num_threads"] =
      blas_threads != nullptr ? nlohmann::json(blas_threads) : nlohmann::json(nullptr);
  j["decode_daemons"] = o.decode_daemons;
  j["base_model"] = o.base_model;
  j["specialist_model"] = o.specialist_model;
  j["max_tokens"] = o.max_tokens;
  j["load_fraction"] = o.load_fraction;
  j["saturation_rate"] = r.saturation_rate;
  j["soak_rate"] = r.soak_rate;
  j["shadow_rate"] = o.shadow_rate >= 0 ? nlohmann::json(o.shadow_rate) : nlohmann::json(nullptr);
  j["shadow_piece_tokens"] =
      o.shadow_piece_tokens > 0 ? nlohmann::json(o.shadow_piece_tokens) : nlohmann::json(nullptr);
  j["shadow_max_tokens_per_s"] = o.shadow_max_tokens_per_s > 0
                                     ? nlohmann::json(o.shadow_max_tokens_per_s)
                                     : nlohmann::json(nullptr);
  j["shadow_samples"] = r.shadow_samples;
  j["shadow_dropped"] = r.shadow_dropped;
  j["daemons"] = r.daemons;
  for (const SaturationLevel& l : r.saturation) {
    j["saturation"].push_back({{"concurrency", l.concurrency},
                               {"rate_asked", l.rate_asked},
                               {"kept_up", l.kept_up},
                               {"ok", l.ok},
                               {"failed", l.failed},
                               {"requests_per_s", l.requests_per_s},
                               {"ttft_p50_ms", l.ttft_p50_ms},
                               {"ttft_p99_ms", l.ttft_p99_ms}});
  }
  for (const SoakCheck& c : r.checks) {
    j["checks"].push_back({{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}});
  }
  j["passed"] = r.passed;
  j["report"] = r.report;
  return j;
}

std::string SoakMarkdown(const SoakResult& r) {
  std::string md =
      "| load | completed req/s | TTFT p50 ms | TTFT p99 ms | failed |\n|---|---|---|---|---|\n";
  for (const SaturationLevel& l : r.saturation) {
    const std::string load = l.concurrency > 0
                                 ? absl::StrCat("closed loop, concurrency ", l.concurrency)
                                 : absl::StrCat("open loop, ", Fmt(l.rate_asked, 2), " req/s asked",
                                                l.kept_up ? "" : " (fell behind)");
    absl::StrAppend(&md, "| ", load, " | ", Fmt(l.requests_per_s, 2), " | ", Fmt(l.ttft_p50_ms),
                    " | ", Fmt(l.ttft_p99_ms), " | ", l.failed, " |\n");
  }
  const nlohmann::json& rep = r.report;
  absl::StrAppend(&md, "\nSaturation (highest open-loop rate kept up): ", Fmt(r.saturation_rate, 2),
                  " req/s. Soak at ", Fmt(r.soak_rate, 2), " req/s asked, ",
                  Fmt(rep["schedule"]["achieved_rate"].get<double>(), 2), " achieved, for ",
                  Fmt(rep["duration_s"].get<double>(), 0),
                  " s: ", rep["requests"]["issued"].get<int64_t>(), " requests");
  if (!rep["ttft_ms"]["p50"].is_null()) {
    absl::StrAppend(&md, ", TTFT p50 ", Fmt(rep["ttft_ms"]["p50"].get<double>()), " ms, p99 ",
                    Fmt(rep["ttft_ms"]["p99"].get<double>()), " ms");
  }
  absl::StrAppend(&md, ". Shadow oracle: ", Fmt(r.shadow_samples, 0), " samples compared, ",
                  Fmt(r.shadow_dropped, 0), " dropped");
  absl::StrAppend(&md, ".\n\n| check | result | figures |\n|---|---|---|\n");
  for (const SoakCheck& c : r.checks) {
    absl::StrAppend(&md, "| ", c.name, " | ", c.passed ? "pass" : "**FAIL**", " | ", c.detail,
                    " |\n");
  }
  return md;
}

}  // namespace scd::e2e
