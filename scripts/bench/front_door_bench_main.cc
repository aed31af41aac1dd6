// scd-front-door-bench: the HTTP front door under slow clients (see
// common/tools/e2e/front_door_bench.h). Starts one prefill daemon and N decode daemons from
// build/bin, finds the saturation rate, then alternates Poisson runs at --fraction of it
// without and with --slow idle, slowly-sending connections held against the prefill daemon,
// probing /health throughout. Writes PREFIX.json and PREFIX.md. Exit status 1 when the p99
// ratio exceeds --max-ratio or a /health probe failed.
//   scd-front-door-bench --base DIR --specialist DIR --artifact FILE --out PREFIX
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/tools/cli/flags.h"
#include "common/tools/e2e/front_door_bench.h"

namespace {
constexpr char kProgram[] = "scd-front-door-bench";
}  // namespace

int main(int argc, char** argv) {
  scd::e2e::FrontDoorBenchOptions o;
  std::string out;
  int prompts = 64, words = 24;
  float fraction = 0.5f, run_s = 30, saturation_s = 20, max_ratio = 1.10f;
  scd::cli::FlagParser flags(kProgram, "--base DIR --specialist DIR --artifact FILE --out PREFIX");
  flags.AddString("base", &o.base_model, "producer checkpoint", true);
  flags.AddString("specialist", &o.specialist_model, "consumer checkpoint", true);
  flags.AddString("artifact", &o.artifact, "the pair's calibration artifact", true);
  flags.AddString("out", &out, "output prefix", true);
  flags.AddString("bin-dir", &o.bin_dir, "where scd-prefill and scd-decode are");
  flags.AddInt("decode-daemons", &o.decode_daemons, "decode daemons to start");
  flags.AddInt("slow", &o.slow_connections, "slow connections held (at most 20000)");
  flags.AddInt("rounds", &o.rounds, "pairs of runs, without and with slow clients");
  flags.AddInt("prompts", &prompts, "synthetic prompts in the workload");
  flags.AddInt("words", &words, "words per synthetic prompt");
  flags.AddInt("max-tokens", &o.max_tokens, "tokens generated per request");
  flags.AddFloat("fraction", &fraction, "load as a fraction of the saturation rate");
  flags.AddFloat("run-seconds", &run_s, "duration of each measured run");
  flags.AddFloat("saturation-seconds", &saturation_s, "duration of the saturation run");
  flags.AddFloat("max-ratio", &max_ratio, "largest p99 ratio (with / without) that passes");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  namespace fs = std::filesystem;
  for (std::string* path : {&o.base_model, &o.specialist_model, &o.artifact, &o.bin_dir}) {
    *path = fs::absolute(*path).lexically_normal().string();
  }
  o.load_fraction = fraction;
  o.run_s = run_s;
  o.saturation_s = saturation_s;
  auto workload = scd::loadgen::SyntheticPrompts(prompts, words, 1);
  if (!workload.ok()) return flags.Fail(workload.status());
  o.prompts = *std::move(workload);
  o.workdir = out + ".work";
  fs::create_directories(o.workdir);
  std::cerr << kProgram << ": logs in " << o.workdir << "\n"
            << scd::cli::QuotedCommandLine(argc, argv) << "\n";
  auto result = scd::e2e::RunFrontDoorBench(
      o, [](const std::string& line) { std::cerr << line << std::endl; });
  if (!result.ok()) return flags.Fail(result.status());
  nlohmann::json j = scd::e2e::FrontDoorJson(o, *result);
  j["command"] = scd::cli::QuotedCommandLine(argc, argv);
  if (absl::Status s = scd::WriteFileAtomically(out + ".json", j.dump(2) + "\n"); !s.ok()) {
    return flags.Fail(s);
  }
  const std::string md = scd::e2e::FrontDoorMarkdown(o, *result);
  std::ofstream(out + ".md") << md;
  std::cout << md;
  if (result->probes_failed > 0) return flags.Fail("a /health probe failed");
  if (result->p99_ratio > max_ratio) {
    return flags.Fail(absl::StrCat("p99 ratio ", result->p99_ratio, " exceeds ", max_ratio));
  }
  return 0;
}
