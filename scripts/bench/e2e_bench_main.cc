// scd-e2e-bench: the end-to-end benchmark (see common/tools/e2e/e2e_bench.h). Starts one
// prefill daemon and N decode daemons from build/bin, runs the shared-prefix workload for
// every (mode, bandwidth, warm/cold) cell, prints a progress line per cell, and writes JSON,
// a Markdown table and a PNG of TTFT p50 against bandwidth.
//   scd-e2e-bench --base DIR --specialist DIR --artifact FILE --babi FILE --out PREFIX
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/scd/artifact.h"
#include "common/tools/cli/flags.h"
#include "common/tools/e2e/auto_report.h"
#include "common/tools/e2e/e2e_bench.h"

namespace {
constexpr char kProgram[] = "scd-e2e-bench";

// --link-steps: mode auto over a link that changes mid-run; PREFIX.json, .md, .png.
int RunLinkSteps(const scd::e2e::E2eBenchOptions& o, const std::vector<scd::e2e::LinkStep>& steps,
                 const std::string& out, const std::string& command, scd::cli::FlagParser& flags) {
  auto samples = scd::e2e::RunLinkSteps(
      o, steps, [](const std::string& line) { std::cerr << line << std::endl; });
  if (!samples.ok()) return flags.Fail(samples.status());
  const auto summary = scd::e2e::SummarizeLinkSteps(steps, *samples);
  nlohmann::json j = scd::e2e::LinkStepsJson(summary, *samples);
  j["command"] = command;
  j["label"] = o.label;
  j["quality_floor"] = o.quality_floor;
  std::ofstream(out + ".json") << j.dump() << "\n";
  const std::string md = scd::e2e::LinkStepsMarkdown(summary);
  std::ofstream(out + ".md") << md;
  absl::Status st = scd::e2e::WriteLinkStepsPlot(
      summary, *samples, "mode auto over a changing link, " + o.label, out + ".png");
  if (!st.ok()) return flags.Fail(st);
  std::cout << md;  // ends with link_switch_seconds_max=
  return 0;
}
// The cells' PREFIX.json, .md and .png; with mode auto among the modes also PREFIX.auto.md and
// .auto.png. The tables also go to stdout.
absl::Status WriteCells(const scd::e2e::E2eBenchOptions& o,
                        const std::vector<scd::e2e::E2eCell>& cells, const std::string& out,
                        const std::string& command) {
  nlohmann::json j = scd::e2e::E2eCellsJson(o, cells);
  j["command"] = command;
  std::ofstream(out + ".json") << j.dump(2) << "\n";
  const std::string md = scd::e2e::E2eCellsMarkdown(cells);
  std::ofstream(out + ".md") << md;
  SCD_RETURN_IF_ERROR(scd::e2e::WriteE2ePlot(cells, "TTFT p50, " + o.label, out + ".png"));
  std::cout << md;
  if (std::find(o.modes.begin(), o.modes.end(), "auto") == o.modes.end()) {
    return absl::OkStatus();
  }
  SCD_ASSIGN_OR_RETURN(scd::ScdArtifact artifact, scd::ScdArtifact::Load(o.artifact));
  const auto groups = scd::e2e::CompareAuto(cells, o.quality_floor, artifact.quality);
  const std::string auto_md = scd::e2e::AutoMarkdown(groups);
  std::ofstream(out + ".auto.md") << auto_md;
  SCD_RETURN_IF_ERROR(scd::e2e::WriteAutoPlot(
      groups, "mode auto against the best fixed mode, " + o.label, out + ".auto.png"));
  std::cout << "\n" << auto_md;  // ends with auto_vs_best_fixed_max=
  return absl::OkStatus();
}

// --bandwidths: Gbit/s values > 0, comma-separated.
absl::StatusOr<std::vector<double>> ParseBandwidths(const std::string& text) {
  std::vector<double> out;
  for (absl::string_view b : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double gbps = 0;
    if (!absl::SimpleAtod(b, &gbps) || !(gbps > 0) || !std::isfinite(gbps)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--bandwidths takes Gbit/s values > 0, comma-separated, not \"", b, "\""));
    }
    out.push_back(gbps);
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  scd::e2e::E2eBenchOptions o;
  std::string babi, out, modes = "oracle,raw,quant8,recompute,scd", bandwidths = "1,10,100";
  int contexts = 12, questions = 3, context_tokens = 400;
  bool no_f1 = false, warm_only = false, cold_only = false;
  std::string link_steps;
  scd::cli::FlagParser flags(
      kProgram, "--base DIR --specialist DIR --artifact FILE --babi FILE --out PREFIX");
  flags.AddString("base", &o.base_model, "producer checkpoint", true);
  flags.AddString("specialist", &o.specialist_model, "consumer checkpoint", true);
  flags.AddString("artifact", &o.artifact, "the pair's calibration artifact", true);
  flags.AddString("babi", &babi, "bAbI task-1 file the shared-prefix workload is built from", true);
  flags.AddString("out", &out, "output prefix: PREFIX.json, PREFIX.md, PREFIX.png", true);
  flags.AddString("label", &o.label, "name of this run in the report");
  flags.AddString("bin-dir", &o.bin_dir, "where scd-prefill and scd-decode are");
  flags.AddString("modes", &modes, "codec modes, comma-separated");
  flags.AddString("bandwidths", &bandwidths, "emulated bandwidths in Gbit/s, comma-separated");
  flags.AddString("transport", &o.transport, "data plane: tcp or ucx");
  flags.AddInt("decode-daemons", &o.decode_daemons, "decode daemons to start");
  flags.AddInt("contexts", &contexts, "shared contexts");
  flags.AddInt("questions", &questions, "questions per context");
  flags.AddInt("context-tokens", &context_tokens, "approximate tokens per context");
  flags.AddInt("max-tokens", &o.max_tokens, "tokens generated per answer");
  flags.AddInt("passes", &o.passes,
               "measure every cell this many times, the modes' order rotated each pass; a cell "
               "pools its passes' samples");
  flags.AddBool("no-f1", &no_f1, "timing only (synthetic pairs)");
  flags.AddBool("warm-only", &warm_only, "skip the cold-cache cells");
  flags.AddBool("cold-only", &cold_only, "skip the warm-cache cells");
  float quality_floor = static_cast<float>(o.quality_floor);
  flags.AddFloat("quality-floor", &quality_floor,
                 "mode auto's quality_floor; fixed modes below it are not auto's rivals");
  flags.AddString("link-steps", &link_steps,
                  "instead of the cells: mode auto while the link goes through GBPS:SECONDS "
                  "steps, comma-separated (e.g. 100:40,0.1:40,10:40)");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  namespace fs = std::filesystem;
  // The daemons resolve relative config paths against the config file's directory.
  for (std::string* path : {&o.base_model, &o.specialist_model, &o.artifact, &o.bin_dir}) {
    *path = fs::absolute(*path).lexically_normal().string();
  }
  if (!(quality_floor >= 0 && quality_floor <= 1)) {
    return flags.UsageError("--quality-floor must be in [0, 1]");
  }
  o.quality_floor = std::round(quality_floor * 1e4) / 1e4;  // 0.95, not 0.949999988
  std::vector<scd::e2e::LinkStep> steps;
  if (!link_steps.empty()) {
    auto parsed = scd::e2e::ParseLinkSteps(link_steps);
    if (!parsed.ok()) return flags.UsageError(std::string(parsed.status().message()));
    steps = std::move(*parsed);
  }
  o.score_f1 = !no_f1;
  if (o.passes < 1) return flags.UsageError("--passes must be at least 1");
  if (warm_only && cold_only) return flags.UsageError("--warm-only and --cold-only leave no cell");
  o.warm = !cold_only;
  o.cold = !warm_only;
  o.modes = absl::StrSplit(modes, ',', absl::SkipEmpty());
  auto bandwidths_gbps = ParseBandwidths(bandwidths);
  if (!bandwidths_gbps.ok()) {
    return flags.UsageError(std::string(bandwidths_gbps.status().message()));
  }
  o.bandwidths_gbps = std::move(*bandwidths_gbps);
  scd::e2e::SharedPrefixOptions wo;
  wo.contexts = contexts;
  wo.questions_per_context = questions;
  wo.context_tokens = context_tokens;
  auto workload = scd::e2e::LoadBabiSharedPrefixWorkload(babi, o.base_model, wo);
  if (!workload.ok()) return flags.Fail(workload.status());
  o.workload = std::move(*workload);
  o.workdir = out + ".work";
  std::filesystem::create_directories(o.workdir);
  std::cerr << kProgram << ": " << o.workload.size() << " contexts x " << questions
            << " questions, " << o.modes.size() << " modes x " << o.bandwidths_gbps.size()
            << " bandwidths; logs in " << o.workdir << "\n"
            << scd::cli::QuotedCommandLine(argc, argv) << "\n";
  if (!steps.empty()) {
    return RunLinkSteps(o, steps, out, scd::cli::QuotedCommandLine(argc, argv), flags);
  }
  auto cells =
      scd::e2e::RunE2eBench(o, [](const std::string& line) { std::cerr << line << std::endl; });
  if (!cells.ok()) return flags.Fail(cells.status());
  if (absl::Status st = WriteCells(o, *cells, out, scd::cli::QuotedCommandLine(argc, argv));
      !st.ok()) {
    return flags.Fail(st);
  }
  return 0;
}
