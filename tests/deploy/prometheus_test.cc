// deploy/prometheus: the alert and recording rules pass `promtool check rules`, their unit
// tests (scd-rules.test.yml: series at the magnitudes RESULTS.md measured) pass `promtool test
// rules`, and the scrape config passes `promtool check config`. promtool comes with Debian's
// prometheus package (scripts/setup.sh).
#include <catch2/catch.hpp>
#include <string>

#include "tests/test_support.h"

namespace scd::testing {
namespace {

void Promtool(const std::string& args) {
  const CommandResult r = RunCommand("cd " + ShellQuote(SourceFile("deploy/prometheus")) +
                                     " && promtool " + args + " 2>&1");
  INFO("promtool " << args << ":\n" << r.output);
  CHECK(r.exit_code == 0);
}

}  // namespace

TEST_CASE("The Prometheus rules, their unit tests and the scrape config pass promtool", "[cpu]") {
  REQUIRE(CommandExists("promtool"));  // Debian package prometheus: scripts/setup.sh
  Promtool("check rules scd-rules.yml");
  Promtool("test rules scd-rules.test.yml");
  Promtool("check config prometheus.yml");
}

}  // namespace scd::testing
