// Every command-line tool and benchmark in build/bin ends its command line the same way
// (common/tools/cli/flags.h): --help prints the usage to stdout and exits 0; an unknown flag, a
// stray argument or an unparsable number prints "<program>: <message>" and the usage to
// stderr and exits 2, before any work starts; a failure after parsing exits 1 with
// "<program>: <message>". The daemons' own command line is tested in tests/config and
// tests/daemons.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/test_support.h"

namespace scd {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using testing::CommandResult;
using testing::RunCommand;
using testing::ShellQuote;

struct Tool {
  std::string binary;    // in SCD_BIN_DIR
  std::string command;   // binary plus any subcommand
  std::string program;   // the name its messages start with
  std::string int_flag;  // a flag that takes an integer
};

std::vector<Tool> Tools() {
  std::vector<Tool> tools = {
      {"scd-generate", "", "scd-generate", "--max-tokens"},
      {"scd-calibrate", "", "scd-calibrate", "--max-tokens"},
      {"scd-eval", "", "scd-eval", "--max-examples"},
      {"scd-ablate", "", "scd-ablate", "--step"},
      {"scd-sekv-calibrate", "", "scd-sekv-calibrate", "--sequences"},
      {"scd-loadgen", "", "scd-loadgen", "--requests"},
      {"scd-synth-pair", "", "scd-synth-pair", "--layers"},
      {"scd-e2e-bench", "", "scd-e2e-bench", "--contexts"},
      {"scd-soak", "", "scd-soak", "--contexts"},
      {"scd-cluster-bench", "", "scd-cluster-bench", "--streams"},
      {"scd-registry-bench", "", "scd-registry-bench", "--decode"},
      {"scd-front-door-bench", "", "scd-front-door-bench", "--slow"},
      {"scd-sekv-bench", "", "scd-sekv-bench", "--steps"},
      {"scd-bench", "runtime", "scd-bench runtime", "--tokens"},
      {"scd-bench", "chunked-prefill", "scd-bench chunked-prefill", "--streams"},
      {"scd-bench", "rebuild", "scd-bench rebuild", "--rows"},
      {"scd-bench", "small-batch", "scd-bench small-batch", "--reps"},
  };
#ifdef SCD_HAVE_GPU_BENCH
  tools.push_back({"scd-gpu-bench", "", "scd-gpu-bench", "--steps"});
#endif
  return tools;
}

std::string CommandOf(const Tool& tool) {
  std::string c = ShellQuote(std::string(SCD_BIN_DIR) + "/" + tool.binary);
  if (!tool.command.empty()) c += " " + tool.command;
  return c;
}

// stdout alone and stderr alone of `command` (run twice), with its exit code.
struct Streams {
  int exit_code = -1;
  std::string out, err;
};

Streams Run(const std::string& command) {
  const CommandResult out = RunCommand("{ " + command + " 2>/dev/null; }");
  const CommandResult err = RunCommand("{ " + command + " 2>&1 >/dev/null; }");
  CHECK(out.exit_code == err.exit_code);
  return Streams{out.exit_code, out.output, err.output};
}

TEST_CASE("Every program in the bin folder but the daemons is checked here", "[cpu]") {
  std::set<std::string> listed;
  for (const Tool& tool : Tools()) listed.insert(tool.binary);
  for (const auto& entry : std::filesystem::directory_iterator(SCD_BIN_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name == "scd-prefill" || name == "scd-decode") continue;  // tests/config, tests/daemons
    INFO(name << " is in " << SCD_BIN_DIR << " but not in Tools()");
    CHECK(listed.count(name) == 1);
  }
}

TEST_CASE("Every tool prints its usage for --help and exits 0", "[cpu]") {
  for (const Tool& tool : Tools()) {
    INFO(tool.program);
    const Streams s = Run(CommandOf(tool) + " --help");
    CHECK(s.exit_code == 0);
    CHECK_THAT(s.out, StartsWith("usage: " + tool.program + " "));
    CHECK_THAT(s.out, Contains(tool.int_flag + " "));
    CHECK(s.err.empty());
  }
}

TEST_CASE("Every tool refuses a bad command line with exit code 2 and its usage", "[cpu]") {
  const std::vector<std::pair<std::string, std::string>> mistakes = {
      {"--no-such-flag", "unknown flag --no-such-flag"},
      {"stray", "unexpected argument \"stray\" (flags are spelled --name)"},
      {"-x", "unknown option \"-x\" (flags are spelled --name)"},
  };
  for (const Tool& tool : Tools()) {
    for (const auto& [args, message] : mistakes) {
      INFO(tool.program << " " << args);
      const Streams s = Run(CommandOf(tool) + " " + args);
      CHECK(s.exit_code == 2);
      CHECK(s.out.empty());
      CHECK_THAT(s.err, StartsWith(tool.program + ": " + message + "\n\nusage: " + tool.program));
    }
    INFO(tool.program << " " << tool.int_flag << " 12x");
    const Streams s = Run(CommandOf(tool) + " " + tool.int_flag + " 12x");
    CHECK(s.exit_code == 2);
    CHECK_THAT(s.err, StartsWith(tool.program + ": " + tool.int_flag +
                                 ": \"12x\" is not an integer\n\nusage: "));
  }
}

TEST_CASE("scd-bench names its benchmarks and refuses an unknown one", "[cpu]") {
  const std::string bench = ShellQuote(std::string(SCD_BIN_DIR) + "/scd-bench");
  const Streams none = Run(bench);
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, StartsWith("usage: scd-bench <benchmark> [flags]\n"));
  const Streams help = Run(bench + " --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Contains("  small-batch "));
  const Streams unknown = Run(bench + " warp-speed");
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, StartsWith("scd-bench: unknown benchmark \"warp-speed\"\n"));
}

TEST_CASE("A value checked after parsing is a usage error before any work", "[cpu]") {
  const std::string e2e = ShellQuote(std::string(SCD_BIN_DIR) + "/scd-e2e-bench") +
                          " --base b --specialist s --artifact a --babi q --out o";
  for (const char* bad : {"abc", "0", "-1", "10,x", "nan"}) {
    INFO(bad);
    const Streams s = Run(e2e + " --bandwidths " + bad);
    CHECK(s.exit_code == 2);
    CHECK_THAT(s.err, StartsWith("scd-e2e-bench: --bandwidths takes Gbit/s values > 0"));
  }
  // Flags that do not fit together, or values out of range: the tool, its arguments (after
  // its required flags) and the start of its message.
  const std::string calibrate = "scd-calibrate --producer p --corpus c --out o";
  const std::string soak = "scd-soak --base b --specialist s --artifact a --babi q --out o";
  const std::vector<std::tuple<std::string, std::string, std::string>> misuses = {
      {"scd-e2e-bench --base b --specialist s --artifact a --babi q --out o", " --passes 0",
       "--passes must be at least 1"},
      {calibrate, "", "give one of --consumer and --consumers"},
      {calibrate, " --consumer a --consumers b,c", "give one of --consumer and --consumers"},
      {calibrate, " --consumers b,c --shared-basis svd",
       "--shared-basis: shared basis \"svd\" is not"},
      {calibrate, " --consumer a --shared-basis pca", "--shared-basis goes with --consumers"},
      {calibrate, " --consumer a --extend x --shared-basis pca",
       "--shared-basis names a new basis"},
      {soak, " --shadow-piece-tokens -1", "--shadow-piece-tokens must be >= 0"},
      {soak, " --warmup -5", "--warmup must be >= 0"},
      {soak, " --shadow-max-tokens-per-s -2", "--shadow-max-tokens-per-s must be >= 0"}};
  for (const auto& [command, args, message] : misuses) {
    INFO(command << args);
    const std::string program = command.substr(0, command.find(' '));
    const Streams s = Run(ShellQuote(std::string(SCD_BIN_DIR) + "/" + program) +
                          command.substr(program.size()) + args);
    CHECK(s.exit_code == 2);
    CHECK_THAT(s.err, StartsWith(program + ": " + message));
  }
  const std::string sekv_bench = ShellQuote(std::string(SCD_BIN_DIR) + "/scd-sekv-bench");
  const Streams mixed = Run(sekv_bench + " --mixed 1:1,2");
  CHECK(mixed.exit_code == 2);
  CHECK_THAT(mixed.err, StartsWith("scd-sekv-bench: --mixed takes plain:SEKV pairs of counts "
                                   ">= 1, not \"2\"\n\nusage: "));
  const Streams alone = Run(sekv_bench + " --surprisal-model m");
  CHECK(alone.exit_code == 2);
  CHECK_THAT(alone.err, StartsWith("scd-sekv-bench: --surprisal-model and --surprisal-text go "
                                   "together"));
#ifdef SCD_HAVE_GPU_BENCH
  const Streams model = Run(ShellQuote(std::string(SCD_BIN_DIR) + "/scd-gpu-bench") +
                            " --out o --models mistral-7b,gpt-5");
  CHECK(model.exit_code == 2);
  CHECK_THAT(model.err, StartsWith("scd-gpu-bench: --models: unknown model \"gpt-5\" "
                                   "(mistral-7b, llama3-8b, or tiny)\n\nusage: "));
#endif
}

TEST_CASE("A tool that fails after parsing exits 1 with its name and the reason", "[cpu]") {
  const std::string missing = testing::TempDir() + "/no-such-model";
  const Streams s = Run(ShellQuote(std::string(SCD_BIN_DIR) + "/scd-generate") + " --model " +
                        ShellQuote(missing) + " --prompt hello");
  CHECK(s.exit_code == 1);
  CHECK(s.out.empty());
  CHECK_THAT(s.err, StartsWith("scd-generate: cannot load model: "));
  CHECK_THAT(s.err, Contains(missing));
  CHECK_THAT(s.err, !Contains("usage:"));
}

}  // namespace
}  // namespace scd
