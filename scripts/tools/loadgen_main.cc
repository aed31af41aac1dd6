// scd-loadgen: load-tests an OpenAI-compatible server; scd-soak drives it too.
// Drives streaming requests at a Poisson rate (--rate) or a fixed concurrency (--concurrency)
// for --requests N and/or --duration SECONDS, with prompts from a file or synthetic ones;
// prints a live progress line on stderr and a summary on stdout; writes the results JSON
// (--json; schema in common/tools/loadgen/report.h), a TTFT-distribution PNG, optionally
// per-request JSONL records and a time-series PNG. All logic lives in common/tools/loadgen/.
//
// Exit status: 0 when the run completed and at least one request succeeded; 1 when none did
// or an output could not be written; 2 for a bad command line. Ctrl-C stops issuing, lets the
// requests in flight finish, and still writes everything; a second Ctrl-C kills.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/file_io.h"
#include "common/tools/cli/flags.h"
#include "common/tools/loadgen/report.h"
#include "common/tools/loadgen/runner.h"
#include "common/tools/loadgen/stream_client.h"
#include "common/tools/loadgen/workload.h"
#include "nlohmann/json.hpp"

namespace {

constexpr char kProgram[] = "scd-loadgen";

std::atomic<bool> g_stop{false};

void OnSigint(int) {
  if (g_stop.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

// OUT.json -> OUT_ttft.png (the default --png).
std::string DefaultPngPath(const std::string& json_path) {
  std::string stem = json_path;
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".json") == 0)
    stem.resize(stem.size() - 5);
  return stem + "_ttft.png";
}

// Writes the progress line: redrawn in place on a terminal, one line per report otherwise.
class ProgressLine {
 public:
  explicit ProgressLine(bool tty) : tty_(tty) {}
  void Show(const scd::loadgen::Progress& p) {
    const std::string line = scd::loadgen::FormatProgress(p);
    if (tty_) {
      const size_t pad = last_width_ > line.size() ? last_width_ - line.size() : 0;
      std::cerr << "\r" << line << std::string(pad, ' ') << std::flush;
      last_width_ = line.size();
    } else {
      std::cerr << line << "\n" << std::flush;
    }
  }
  void End() {
    if (tty_ && last_width_ > 0) std::cerr << "\n";
    last_width_ = 0;
  }

 private:
  bool tty_;
  size_t last_width_ = 0;
};

// Every command-line value, with its default.
struct Flags {
  std::vector<std::string> urls;
  std::string model, prompts_path, json_out, png_out, timeseries_png, records_out;
  std::string api_key, rss_pids, extra_body = "{}";
  float rate = 0, duration = 0, timeout = 300, slo_ttft_ms = 0, slo_itl_ms = 0, interval = 10;
  float drift_window = 60;
  int concurrency = 0, requests = 0, warmup = 0, max_tokens = 128, synthetic_tokens = 0;
  int synthetic_count = 0, max_in_flight = 4096;
  uint64_t seed = 0;
  bool chat = true, completions = false, quiet = false, shuffle = false;
};

void AddFlags(scd::cli::FlagParser& flags, Flags& f) {
  flags.AddStringList("url", &f.urls,
                      "server base URL, http[s]://HOST:PORT[/PREFIX]; several (repeated or "
                      "comma-separated) spread the requests over them in turn",
                      true);
  flags.AddString("model", &f.model, "model name sent in every request", true);
  flags.AddFloat("rate", &f.rate, "open loop: Poisson arrivals at R requests/s");
  flags.AddInt("concurrency", &f.concurrency, "closed loop: keep C requests in flight");
  flags.AddInt("requests", &f.requests, "measured requests to issue (0 = until --duration)");
  flags.AddFloat("duration", &f.duration, "stop issuing after S seconds (0 = until --requests)");
  flags.AddString("prompts", &f.prompts_path,
                  "prompt file: JSONL ({\"prompt\"}, {\"messages\"} or {\"context\", "
                  "\"questions\"}, optional \"max_tokens\") or plain text, one per line");
  flags.AddInt("synthetic-prompt-tokens", &f.synthetic_tokens,
               "instead of --prompts: synthetic prompts of about N words (~tokens)");
  flags.AddInt("synthetic-prompts", &f.synthetic_count,
               "distinct synthetic prompts (0 = one per request, at most 10000 and ~64 MB)");
  flags.AddBool("shuffle", &f.shuffle,
                "shuffle the prompt order (seeded) instead of cycling in order");
  flags.AddBool("chat", &f.chat, "use /v1/chat/completions");
  flags.AddBool("completions", &f.completions, "use /v1/completions instead");
  flags.AddInt("max-tokens", &f.max_tokens, "max_tokens for prompts that set none");
  flags.AddString("extra-body", &f.extra_body,
                  "JSON object merged into every request body, e.g. '{\"temperature\": 0}'");
  flags.AddString("api-key", &f.api_key, "sent as Authorization: Bearer KEY");
  flags.AddFloat("timeout", &f.timeout, "per-request timeout in seconds (start to outcome)");
  flags.AddFloat("slo-ttft-ms", &f.slo_ttft_ms, "goodput SLO on TTFT in ms (0 = no bound)");
  flags.AddFloat("slo-itl-ms", &f.slo_itl_ms,
                 "goodput SLO on each request's mean inter-token latency in ms (0 = no bound)");
  flags.AddUint64("seed", &f.seed, "seed for arrivals, synthetic prompts and shuffling");
  flags.AddInt("warmup", &f.warmup, "warm-up requests before measuring (reported apart)");
  flags.AddInt("max-in-flight", &f.max_in_flight, "open-loop cap on requests in flight");
  flags.AddString("json", &f.json_out, "write the results JSON here");
  flags.AddString("png", &f.png_out,
                  "TTFT distribution PNG (default: OUT_ttft.png beside --json; 'none' = skip)");
  flags.AddString("timeseries-png", &f.timeseries_png, "PNG of TTFT p50/p99 (and RSS) over time");
  flags.AddString("records", &f.records_out, "write one JSON line per request here");
  flags.AddFloat("interval", &f.interval, "time-series interval and RSS sampling period, s");
  flags.AddString("rss-pid", &f.rss_pids, "comma-separated server pids whose RSS to sample");
  flags.AddFloat("drift-window", &f.drift_window,
                 "window (s) for the first-vs-last p99 TTFT drift in the JSON");
  flags.AddBool("quiet", &f.quiet, "no progress line or banner (the summary still prints)");
}

// The checks across flags; returns the exit status of a bad command line.
std::optional<int> CheckFlags(const scd::cli::FlagParser& flags, const Flags& f) {
  if (flags.Seen("chat") && f.completions) {
    return flags.UsageError("--chat and --completions exclude each other");
  }
  if (f.prompts_path.empty() == (f.synthetic_tokens <= 0)) {
    return flags.UsageError("give exactly one of --prompts FILE or --synthetic-prompt-tokens N");
  }
  if (f.synthetic_count < 0) return flags.UsageError("--synthetic-prompts must be >= 0");
  if (f.slo_ttft_ms < 0 || f.slo_itl_ms < 0) return flags.UsageError("SLO bounds must be >= 0");
  if (!(f.drift_window > 0)) return flags.UsageError("--drift-window must be > 0");
  return std::nullopt;
}

// Fills the run's options from the flags; returns the exit status of a bad command line.
std::optional<int> BuildLoadOptions(const scd::cli::FlagParser& flags, const Flags& f, bool tty,
                                    scd::loadgen::LoadOptions& options) {
  for (size_t i = 0; i < f.urls.size(); ++i) {
    absl::StatusOr<scd::loadgen::Target> target = scd::loadgen::ParseUrl(f.urls[i]);
    if (!target.ok()) return flags.UsageError(target.status());
    if (i == 0) {
      options.client.target = *target;
    } else {
      options.more_targets.push_back(*target);
    }
  }
  options.client.api_key = f.api_key;
  options.client.timeout_s = f.timeout;
  options.body.api = f.completions ? scd::loadgen::Api::kCompletions : scd::loadgen::Api::kChat;
  options.body.model = f.model;
  options.body.max_tokens = f.max_tokens;
  options.body.extra_body = nlohmann::json::parse(f.extra_body, nullptr, false);
  if (!options.body.extra_body.is_object()) {
    return flags.UsageError("--extra-body is not a JSON object");
  }
  options.rate = f.rate;
  options.concurrency = f.concurrency;
  options.requests = f.requests;
  options.duration_s = f.duration;
  options.warmup = f.warmup;
  options.seed = f.seed;
  options.shuffle = f.shuffle;
  options.max_in_flight = f.max_in_flight;
  options.interval_s = f.interval;
  for (absl::string_view part : absl::StrSplit(f.rss_pids, ',', absl::SkipWhitespace())) {
    int pid = 0;
    if (!absl::SimpleAtoi(part, &pid) || pid <= 0) {
      return flags.UsageError(absl::StrCat("--rss-pid: \"", part, "\" is not a process id"));
    }
    options.rss_pids.push_back(pid);
  }
  options.progress_period_s = tty ? 0.5 : 5.0;
  options.stop = &g_stop;
  if (absl::Status s = scd::loadgen::ValidateLoadOptions(options); !s.ok()) {
    return flags.UsageError(s);
  }
  return std::nullopt;
}

// The prompt file, or synthetic prompts; *label names them in the banner and the report.
absl::StatusOr<std::vector<scd::loadgen::Prompt>> LoadPrompts(const Flags& f, std::string* label) {
  if (!f.prompts_path.empty()) {
    *label = f.prompts_path;
    return scd::loadgen::LoadPromptFile(f.prompts_path);
  }
  int count = f.synthetic_count;
  if (count == 0) {
    // One per request, within 10000 prompts and about 64 MB of prompt text.
    count = f.requests > 0 ? std::min(f.requests + f.warmup, 10000) : 10000;
    count = std::min(count, std::max(100, (64 << 20) / (f.synthetic_tokens * 6)));
  }
  *label = absl::StrCat("synthetic:", f.synthetic_tokens, " words");
  return scd::loadgen::SyntheticPrompts(count, f.synthetic_tokens, f.seed);
}

void PrintBanner(const Flags& f, const scd::loadgen::LoadOptions& options,
                 const std::string& prompts_label, size_t num_prompts) {
  const scd::loadgen::Target& target = options.client.target;
  std::cerr << kProgram << ": "
            << (f.rate > 0 ? absl::StrCat("Poisson arrivals at ", f.rate, " req/s")
                           : absl::StrCat("concurrency ", f.concurrency))
            << (f.requests > 0 ? absl::StrCat(", ", f.requests, " requests") : "")
            << (f.duration > 0 ? absl::StrCat(", for ", f.duration, " s") : "")
            << (f.warmup > 0 ? absl::StrCat(" after ", f.warmup, " warm-up") : "") << " -> "
            << target.base << target.path_prefix << scd::loadgen::ApiPath(options.body.api)
            << (options.more_targets.empty()
                    ? ""
                    : absl::StrCat(" and ", options.more_targets.size(), " more server(s) in turn"))
            << " (model " << f.model << "; prompts " << prompts_label << ", " << num_prompts
            << ")\n";
}

// Writes the results JSON, the plots and the records that were asked for; returns the exit
// status so far (kExitFailure when an output could not be written).
int WriteOutputs(const Flags& f, const nlohmann::json& report,
                 const scd::loadgen::RunResult& result) {
  int exit_code = 0;
  auto wrote = [&](const std::string& what, const std::string& path, const absl::Status& s) {
    if (s.ok()) {
      if (!f.quiet) std::cerr << kProgram << ": wrote " << what << " " << path << "\n";
    } else {
      std::cerr << kProgram << ": cannot write " << what << " " << path << ": " << s.message()
                << "\n";
      exit_code = scd::cli::kExitFailure;
    }
  };
  if (!f.json_out.empty()) {
    wrote("results", f.json_out,
          scd::WriteFileAtomically(
              f.json_out,
              report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"));
  }
  std::string png_out = f.png_out;
  if (png_out.empty() && !f.json_out.empty()) png_out = DefaultPngPath(f.json_out);
  if (!png_out.empty() && png_out != "none") {
    const std::string title = absl::StrCat(
        "TTFT, ",
        f.rate > 0 ? absl::StrCat(f.rate, " req/s") : absl::StrCat("concurrency ", f.concurrency),
        ", ", report["ttft_ms"]["count"].get<int64_t>(), " requests");
    wrote("TTFT plot", png_out, scd::loadgen::WriteTtftPng(result.records, png_out, title));
  }
  if (!f.timeseries_png.empty()) {
    wrote("time-series plot", f.timeseries_png,
          scd::loadgen::WriteTimeSeriesPng(report, f.timeseries_png));
  }
  if (!f.records_out.empty()) {
    wrote("records", f.records_out, scd::loadgen::WriteRecordsJsonl(result, f.records_out));
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  scd::cli::FlagParser flags(
      kProgram,
      "--url http://HOST:PORT --model NAME (--rate R | --concurrency C) (--requests N | "
      "--duration S) (--prompts FILE | --synthetic-prompt-tokens N) [--json OUT.json] [options]");
  AddFlags(flags, f);
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (std::optional<int> exit = CheckFlags(flags, f)) return *exit;

  scd::loadgen::LoadOptions options;
  const bool tty = isatty(STDERR_FILENO) == 1;
  if (std::optional<int> exit = BuildLoadOptions(flags, f, tty, options)) return *exit;

  std::string prompts_label;
  absl::StatusOr<std::vector<scd::loadgen::Prompt>> prompts = LoadPrompts(f, &prompts_label);
  if (!prompts.ok()) return flags.Fail(prompts.status());
  if (absl::Status s = scd::loadgen::CheckPromptsForApi(*prompts, options.body.api); !s.ok()) {
    return flags.UsageError(s);
  }

  if (!f.quiet) PrintBanner(f, options, prompts_label, prompts->size());
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGINT, OnSigint);

  ProgressLine progress(tty);
  std::function<void(const scd::loadgen::Progress&)> on_progress;
  if (!f.quiet) on_progress = [&](const scd::loadgen::Progress& p) { progress.Show(p); };
  absl::StatusOr<scd::loadgen::RunResult> result =
      scd::loadgen::RunLoad(options, *prompts, on_progress);
  progress.End();
  if (!result.ok()) return flags.Fail(result.status());

  scd::loadgen::ReportContext context;
  context.url = absl::StrJoin(f.urls, ",");
  context.prompts = prompts_label;
  context.num_prompts = static_cast<int>(prompts->size());
  context.command = scd::cli::QuotedCommandLine(argc, argv);
  context.slo.ttft_s = f.slo_ttft_ms / 1e3;
  context.slo.itl_s = f.slo_itl_ms / 1e3;
  context.drift_window_s = f.drift_window;
  const nlohmann::json report = scd::loadgen::BuildReport(options, *result, context);
  std::cout << scd::loadgen::SummaryText(report) << std::flush;

  const int exit_code = WriteOutputs(f, report, *result);
  if (report["requests"]["ok"].get<int64_t>() == 0) {
    return flags.Fail("no request succeeded");
  }
  return exit_code;
}
