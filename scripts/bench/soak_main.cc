// scd-soak: the soak run (see common/tools/e2e/soak.h). Starts one prefill daemon and N
// decode daemons from build/bin, measures the saturation rate, then runs Poisson load at a
// fraction of it for --duration seconds on the bAbI shared-prefix workload, and checks: zero
// failed requests, every daemon's RSS flat after the warm-up, no p99 TTFT rise beyond 10% from
// the first to the last minute (a fall passes), clean SIGTERM exits. Writes PREFIX.json,
// PREFIX.md and PREFIX_timeseries.png (p50/p99 TTFT and RSS over time). Exit status 1 when a
// check fails.
//   scd-soak --base DIR --specialist DIR --artifact FILE --babi FILE --out PREFIX
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/tools/cli/flags.h"
#include "common/tools/e2e/shared_prefix_workload.h"
#include "common/tools/e2e/soak.h"
#include "common/tools/loadgen/report.h"

namespace {
constexpr char kProgram[] = "scd-soak";

// The bAbI shared-prefix workload's questions as load-generator prompts, each tagged with the
// index of its shared context; `contexts_out` gets the number of contexts.
absl::StatusOr<std::vector<scd::loadgen::Prompt>> WorkloadPrompts(const std::string& babi,
                                                                  const std::string& base_model,
                                                                  int contexts, int questions,
                                                                  size_t* contexts_out) {
  scd::e2e::SharedPrefixOptions wo;
  wo.contexts = contexts;
  wo.questions_per_context = questions;
  auto workload = scd::e2e::LoadBabiSharedPrefixWorkload(babi, base_model, wo);
  if (!workload.ok()) return workload.status();
  std::vector<scd::loadgen::Prompt> prompts;
  for (size_t i = 0; i < workload->size(); ++i) {
    for (const scd::e2e::SharedPrefixQuestion& q : (*workload)[i].questions) {
      scd::loadgen::Prompt p;
      p.text = q.prompt;
      p.group = static_cast<int>(i);
      prompts.push_back(std::move(p));
    }
  }
  *contexts_out = workload->size();
  return prompts;
}

// PREFIX.json, PREFIX.md and PREFIX_timeseries.png; the table also goes to stdout.
absl::Status WriteSoakOutputs(const scd::e2e::SoakOptions& o, const scd::e2e::SoakResult& result,
                              const std::string& out, const std::string& command) {
  nlohmann::json j = scd::e2e::SoakResultJson(o, result);
  j["command"] = command;
  SCD_RETURN_IF_ERROR(scd::WriteFileAtomically(
      out + ".json", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"));
  const std::string md = scd::e2e::SoakMarkdown(result);
  std::ofstream(out + ".md") << md;
  SCD_RETURN_IF_ERROR(scd::loadgen::WriteTimeSeriesPng(result.report, out + "_timeseries.png"));
  std::cout << md;
  return absl::OkStatus();
}
}  // namespace

int main(int argc, char** argv) {
  scd::e2e::SoakOptions o;
  std::string babi, out;
  int contexts = 40, questions = 3;
  float duration = 600, fraction = 0.7f, level_s = 30, rss_warmup = 60, window = 60;
  scd::cli::FlagParser flags(
      kProgram, "--base DIR --specialist DIR --artifact FILE --babi FILE --out PREFIX");
  flags.AddString("base", &o.base_model, "producer checkpoint", true);
  flags.AddString("specialist", &o.specialist_model, "consumer checkpoint", true);
  flags.AddString("artifact", &o.artifact, "the pair's calibration artifact", true);
  flags.AddString("babi", &babi, "bAbI task-1 file the shared-prefix workload is built from", true);
  flags.AddString("out", &out, "output prefix", true);
  flags.AddString("bin-dir", &o.bin_dir, "where scd-prefill and scd-decode are");
  flags.AddString("mode", &o.mode, "codec mode of the specialist");
  flags.AddInt("decode-daemons", &o.decode_daemons, "decode daemons to start");
  flags.AddInt("contexts", &contexts, "shared contexts in the workload");
  flags.AddInt("questions", &questions, "questions per context");
  flags.AddInt("max-tokens", &o.max_tokens, "tokens generated per request");
  flags.AddFloat("duration", &duration, "soak duration in seconds");
  flags.AddFloat("fraction", &fraction, "soak rate as a fraction of the saturation rate");
  flags.AddFloat("level-seconds", &level_s, "duration of each saturation-sweep level");
  flags.AddFloat("rss-warmup", &rss_warmup, "seconds of the soak before RSS must stay flat");
  flags.AddFloat("drift-window", &window, "first and last window (s) compared for p99 TTFT");
  float saturation = 0, shadow_rate = -1;
  flags.AddFloat("saturation-rate", &saturation,
                 "a saturation rate measured before (req/s): no sweep, soak at --fraction of it");
  flags.AddFloat("shadow-rate", &shadow_rate,
                 "the decode daemons' quality.shadow_rate (negative: their default)");
  flags.AddInt("shadow-piece-tokens", &o.shadow_piece_tokens,
               "the decode daemons' quality.shadow_piece_tokens (0: their default)");
  float shadow_budget = 0;
  flags.AddFloat("shadow-max-tokens-per-s", &shadow_budget,
                 "the decode daemons' quality.shadow_max_tokens_per_s (0: their default)");
  flags.AddInt("warmup", &o.warmup_requests,
               "requests before the soak's measured phase (closed loop, 4 at a time): enough "
               "to fill the prefix cache, or the first seconds measure a cold start");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (o.shadow_piece_tokens < 0) return flags.UsageError("--shadow-piece-tokens must be >= 0");
  if (o.warmup_requests < 0) return flags.UsageError("--warmup must be >= 0");
  if (shadow_budget < 0) return flags.UsageError("--shadow-max-tokens-per-s must be >= 0");
  o.shadow_max_tokens_per_s = shadow_budget;
  namespace fs = std::filesystem;
  for (std::string* path : {&o.base_model, &o.specialist_model, &o.artifact, &o.bin_dir}) {
    *path = fs::absolute(*path).lexically_normal().string();
  }
  o.duration_s = duration;
  o.load_fraction = fraction;
  o.saturation_level_s = level_s;
  o.rss_warmup_s = rss_warmup;
  o.drift_window_s = window;
  o.saturation_rate = saturation;
  o.shadow_rate = shadow_rate;
  size_t context_count = 0;
  auto prompts = WorkloadPrompts(babi, o.base_model, contexts, questions, &context_count);
  if (!prompts.ok()) return flags.Fail(prompts.status());
  o.prompts = std::move(*prompts);
  o.workdir = out + ".work";
  fs::create_directories(o.workdir);
  std::cerr << kProgram << ": " << o.prompts.size() << " prompts (" << context_count
            << " shared contexts); logs in " << o.workdir << "\n"
            << scd::cli::QuotedCommandLine(argc, argv) << "\n";
  auto result =
      scd::e2e::RunSoak(o, [](const std::string& line) { std::cerr << line << std::endl; });
  if (!result.ok()) return flags.Fail(result.status());
  if (absl::Status s = WriteSoakOutputs(o, *result, out, scd::cli::QuotedCommandLine(argc, argv));
      !s.ok()) {
    return flags.Fail(s);
  }
  if (!result->passed) return flags.Fail("a soak check failed (see the table)");
  return 0;
}
