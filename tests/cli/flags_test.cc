// FlagParser (common/tools/cli/flags.h): what each spelling of a flag parses to, that every bad
// command line is an error naming the argument (never a silent default), and the three ways a
// tool's command line ends (ParseOrExit, UsageError, Fail) with their exit codes and output.
// QuotedCommandLine is checked against the shell itself: what it prints, sh reads back as the
// same words.
#include "common/tools/cli/flags.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tests/test_support.h"

namespace scd::cli {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

// Every flag type, with the defaults a tool would give them.
struct Values {
  std::string name = "base";
  std::string required;
  int count = 3;
  uint64_t seed = 7;
  float rate = 0.5f;
  bool quiet = false;
  std::vector<int> sizes = {1, 2};
};

void Register(FlagParser& flags, Values& v, bool with_required) {
  flags.AddString("name", &v.name, "a name");
  if (with_required) flags.AddString("must", &v.required, "a required value", true);
  flags.AddInt("count", &v.count, "a count");
  flags.AddUint64("seed", &v.seed, "a seed");
  flags.AddFloat("rate", &v.rate, "a rate");
  flags.AddBool("quiet", &v.quiet, "less output");
  flags.AddIntList("sizes", &v.sizes, "sizes");
}

// Parses `args` (after the program name) into fresh Values.
absl::Status ParseArgs(std::initializer_list<const char*> args, Values* v,
                       bool with_required = false) {
  FlagParser flags("tool", "[flags]");
  Register(flags, *v, with_required);
  std::vector<const char*> argv = {"tool"};
  argv.insert(argv.end(), args.begin(), args.end());
  return flags.Parse(static_cast<int>(argv.size()), argv.data());
}

std::string ErrorOf(std::initializer_list<const char*> args, bool with_required = false) {
  Values v;
  const absl::Status s = ParseArgs(args, &v, with_required);
  if (s.ok()) return "ok";
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

TEST_CASE("FlagParser keeps the defaults when no flag is given", "[cpu]") {
  Values v;
  REQUIRE(ParseArgs({}, &v).ok());
  CHECK(v.name == "base");
  CHECK(v.count == 3);
  CHECK(v.seed == 7);
  CHECK(v.rate == 0.5f);
  CHECK_FALSE(v.quiet);
  CHECK(v.sizes == std::vector<int>{1, 2});
}

TEST_CASE("FlagParser reads each spelling of a flag", "[cpu]") {
  Values v;
  REQUIRE(ParseArgs({"--name", "x y", "--count=-4", "--seed", "18446744073709551615", "--rate",
                     "1e-3", "--quiet", "--sizes", "8,-1,32"},
                    &v)
              .ok());
  CHECK(v.name == "x y");
  CHECK(v.count == -4);
  CHECK(v.seed == UINT64_MAX);
  CHECK(v.rate == 1e-3f);
  CHECK(v.quiet);
  CHECK(v.sizes == std::vector<int>{8, -1, 32});

  SECTION("a value that starts with a dash is still the flag's value") {
    Values w;
    REQUIRE(ParseArgs({"--name", "--count", "--count", "-2"}, &w).ok());
    CHECK(w.name == "--count");
    CHECK(w.count == -2);
  }
  SECTION("an empty value, booleans spelled out, and the last occurrence winning") {
    Values w;
    REQUIRE(ParseArgs({"--name=", "--quiet=true", "--quiet=false", "--sizes=", "--count", "1",
                       "--count", "2"},
                      &w)
                .ok());
    CHECK(w.name.empty());
    CHECK_FALSE(w.quiet);
    CHECK(w.sizes.empty());
    CHECK(w.count == 2);
  }
  SECTION("spaces around a number are allowed, as in every integer flag") {
    Values w;
    REQUIRE(ParseArgs({"--sizes", "1, 2", "--count", " 5"}, &w).ok());
    CHECK(w.sizes == std::vector<int>{1, 2});
    CHECK(w.count == 5);
  }
}

TEST_CASE("FlagParser refuses every malformed command line, naming the argument", "[cpu]") {
  CHECK(ErrorOf({"--nope"}) == "unknown flag --nope");
  CHECK(ErrorOf({"--nope=3"}) == "unknown flag --nope");
  CHECK(ErrorOf({"-n"}) == "unknown option \"-n\" (flags are spelled --name)");
  CHECK(ErrorOf({"-count", "3"}) == "unknown option \"-count\" (flags are spelled --name)");
  CHECK(ErrorOf({"stray"}) == "unexpected argument \"stray\" (flags are spelled --name)");
  CHECK(ErrorOf({"--count", "3", "4"}) == "unexpected argument \"4\" (flags are spelled --name)");
  CHECK(ErrorOf({"--"}) == "unexpected argument \"--\" (flags are spelled --name)");
  CHECK(ErrorOf({"-"}) == "unexpected argument \"-\" (flags are spelled --name)");
  CHECK(ErrorOf({"--count"}) == "--count needs a value");
  // Numbers are read whole and in range: no prefix, no wrap-around, no NaN or infinity.
  CHECK(ErrorOf({"--count", "12x"}) == "--count: \"12x\" is not an integer");
  CHECK(ErrorOf({"--count", ""}) == "--count: \"\" is not an integer");
  CHECK(ErrorOf({"--count", "3000000000"}) == "--count: \"3000000000\" is not an integer");
  CHECK(ErrorOf({"--seed", "-1"}) == "--seed: \"-1\" is not a non-negative integer");
  CHECK(ErrorOf({"--rate", "nan"}) == "--rate: \"nan\" is not a finite number");
  CHECK(ErrorOf({"--rate", "inf"}) == "--rate: \"inf\" is not a finite number");
  CHECK(ErrorOf({"--rate", "1e40"}) == "--rate: \"1e40\" is not a finite number");
  CHECK(ErrorOf({"--quiet=maybe"}) == "--quiet: \"maybe\" is not true or false");
  for (const char* list : {"1,,2", "1,", ",1", "1;2", "1 2", "a"}) {
    INFO(list);
    CHECK_THAT(ErrorOf({"--sizes", list}), Contains("is not a comma-separated list of integers"));
  }
  CHECK(ErrorOf({}, true) == "missing required flag --must");
  CHECK(ErrorOf({"--must", "x"}, true) == "ok");
}

TEST_CASE("FlagParser leaves a flag that failed to parse as it was", "[cpu]") {
  Values v;
  CHECK_FALSE(ParseArgs({"--sizes", "4,x"}, &v).ok());
  CHECK(v.sizes == std::vector<int>{1, 2});
}

TEST_CASE("FlagParser's help skips the required flags and lists every flag", "[cpu]") {
  for (const char* help : {"--help", "-h"}) {
    Values v;
    FlagParser flags("tool", "--must X [flags]");
    Register(flags, v, true);
    const char* argv[] = {"tool", help};
    REQUIRE(flags.Parse(2, argv).ok());
    CHECK(flags.help_requested());
  }
  Values v;
  FlagParser flags("tool", "--must X [flags]");
  Register(flags, v, true);
  const std::string usage = flags.Usage();
  CHECK_THAT(usage, StartsWith("usage: tool --must X [flags]\n"));
  CHECK_THAT(usage, Contains("--must   a required value (required)\n"));
  CHECK_THAT(usage, Contains("--name   a name (default \"base\")\n"));
  CHECK_THAT(usage, Contains("--sizes  sizes (default 1,2)\n"));
  CHECK_THAT(usage, Contains("--quiet  less output (default false)\n"));
}

TEST_CASE("FlagParser records which flags were given", "[cpu]") {
  Values v;
  FlagParser flags("tool", "[flags]");
  Register(flags, v, false);
  const char* argv[] = {"tool", "--count=3", "--quiet"};
  REQUIRE(flags.Parse(3, argv).ok());
  CHECK(flags.Seen("count"));  // even though 3 is the default
  CHECK(flags.Seen("quiet"));
  CHECK_FALSE(flags.Seen("name"));
  CHECK_FALSE(flags.Seen("no-such-flag"));
}

// What ParseOrExit printed and returned for `args`.
struct Outcome {
  std::optional<int> exit;
  std::string out, err;
};

Outcome RunParseOrExit(const std::vector<const char*>& args) {
  Values v;
  FlagParser flags("tool", "--must X [flags]");
  Register(flags, v, true);
  std::vector<const char*> argv = {"tool"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::ostringstream out, err;
  Outcome o;
  o.exit = flags.ParseOrExit(static_cast<int>(argv.size()), argv.data(), out, err);
  o.out = out.str();
  o.err = err.str();
  return o;
}

TEST_CASE("ParseOrExit ends a tool the same way for help and for every mistake", "[cpu]") {
  Values v;
  FlagParser flags("tool", "--must X [flags]");
  Register(flags, v, true);
  const std::string usage = flags.Usage();

  const Outcome ok = RunParseOrExit({"--must", "x"});
  CHECK_FALSE(ok.exit.has_value());
  CHECK(ok.out.empty());
  CHECK(ok.err.empty());

  const Outcome help = RunParseOrExit({"--help"});
  CHECK(help.exit == 0);
  CHECK(help.out == usage);
  CHECK(help.err.empty());

  const std::vector<std::pair<std::vector<const char*>, std::string>> mistakes = {
      {{}, "missing required flag --must"},
      {{"--must", "x", "--nope"}, "unknown flag --nope"},
      {{"--must", "x", "stray"}, "unexpected argument \"stray\" (flags are spelled --name)"},
      {{"--must", "x", "--count", "many"}, "--count: \"many\" is not an integer"},
  };
  for (const auto& [args, message] : mistakes) {
    INFO(message);
    const Outcome bad = RunParseOrExit(args);
    CHECK(bad.exit == kExitUsage);
    CHECK(bad.out.empty());
    CHECK(bad.err == "tool: " + message + "\n\n" + usage);
  }
}

TEST_CASE("UsageError and Fail print the program's name and return their exit codes", "[cpu]") {
  FlagParser flags("tool", "[flags]");
  int count = 1;
  flags.AddInt("count", &count, "a count");
  std::ostringstream usage_err, fail_err, status_err;
  CHECK(flags.UsageError("--count must be >= 2", usage_err) == kExitUsage);
  CHECK(usage_err.str() == "tool: --count must be >= 2\n\n" + flags.Usage());
  CHECK(flags.Fail("cannot read model", fail_err) == kExitFailure);
  CHECK(fail_err.str() == "tool: cannot read model\n");
  CHECK(flags.Fail(absl::NotFoundError("no such file"), status_err) == kExitFailure);
  CHECK(status_err.str() == "tool: no such file\n");
  std::ostringstream usage_status;
  CHECK(flags.UsageError(absl::InvalidArgumentError("bad url"), usage_status) == kExitUsage);
  CHECK(usage_status.str() == "tool: bad url\n\n" + flags.Usage());
}

TEST_CASE("QuotedCommandLine prints words the shell reads back unchanged", "[cpu]") {
  const std::vector<std::string> words = {"scd-bench",  "--json=out.json", "a b",  "it's",
                                          "",           "$HOME",           "x\"y", "back\\slash",
                                          "semi;colon", "new\nline",       "*.cc", "--x=1,2:3"};
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  const std::string line = QuotedCommandLine(static_cast<int>(argv.size()), argv.data());
  // Plain words stay as they are, so that reports stay readable.
  CHECK_THAT(line, StartsWith("scd-bench --json=out.json 'a b' "));
  CHECK_THAT(line, Contains(" --x=1,2:3"));
  // sh splits the line into the same words (printf prints each one between markers).
  const testing::CommandResult r = testing::RunCommand("printf '<%s>' " + line.substr(10));
  REQUIRE(r.exit_code == 0);
  std::string expected;
  for (size_t i = 1; i < words.size(); ++i) expected += "<" + words[i] + ">";
  CHECK(r.output == expected);
}

}  // namespace
}  // namespace scd::cli

namespace scd::cli {
namespace {

TEST_CASE("FlagParser string lists accumulate over occurrences and commas", "[cpu]") {
  std::vector<std::string> urls = {"default"};
  FlagParser flags("tool", "[flags]");
  flags.AddStringList("url", &urls, "servers");
  const char* argv[] = {"tool", "--url", "a", "--url=b, c"};
  REQUIRE(flags.Parse(4, argv).ok());
  CHECK(urls == std::vector<std::string>{"a", "b", "c"});
  FlagParser empty("tool", "[flags]");
  std::vector<std::string> none;
  empty.AddStringList("url", &none, "servers", true);
  const char* bad[] = {"tool", "--url", ","};
  CHECK(empty.Parse(3, bad).message().find("comma-separated list") != std::string::npos);
}

}  // namespace
}  // namespace scd::cli
