// The link-steps report on hand-built samples: a step's settled mode is its second half's most
// used, its switch time is from the change to the first of five requests in a row in that
// mode, and the report's last line is the slowest switch among the steps that changed mode.
#include "common/tools/e2e/link_steps.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace scd::e2e {
namespace {

// Requests every 0.1 s over [from, to) in `mode`, except the first `other` in `early`.
void Add(std::vector<LinkSample>& out, int step, double from, double to, const std::string& mode,
         int other = 0, const std::string& early = "") {
  const int n = static_cast<int>((to - from) * 10 + 0.5);
  for (int i = 0; i < n; ++i) {
    LinkSample s;
    s.t_seconds = from + 0.1 * i;
    s.step = step;
    s.ok = true;
    s.mode = i < other ? early : mode;
    s.rung_name = s.mode;
    s.ttft_ms = s.mode == "raw" ? 5 : 9;
    out.push_back(s);
  }
}

TEST_CASE("link steps parse GBPS:SECONDS items and refuse others, naming them", "[cpu]") {
  auto steps = ParseLinkSteps("100:40,0.1:30,0:5");
  REQUIRE(steps.ok());
  REQUIRE(steps->size() == 3);
  CHECK((*steps)[1].gbps == 0.1);
  CHECK((*steps)[1].seconds == 30);
  CHECK((*steps)[2].gbps == 0);  // unlimited
  for (const char* bad : {"100", "100:0", "-1:5", "x:5", "2e6:5", "1:5:6", ""}) {
    INFO(bad);
    auto r = ParseLinkSteps(bad);
    REQUIRE_FALSE(r.ok());
    if (*bad != '\0') CHECK(testing::StatusHas(r.status(), std::string("\"") + bad + "\""));
  }
}

TEST_CASE("each step settles on its second half's mode; the slowest switch is reported", "[cpu]") {
  const std::vector<LinkStep> steps = {{100, 10}, {0.1, 10}, {10, 10}, {10, 10}};
  std::vector<LinkSample> samples;
  Add(samples, 0, 0, 10, "raw");
  // 1.2 s of raw after the slow-down (twelve requests), then scd; one raw straggler at 3 s.
  Add(samples, 1, 10, 20, "scd", 12, "raw");
  REQUIRE(samples.size() == 200);
  samples[130].mode = samples[130].rung_name = "raw";
  Add(samples, 2, 20, 30, "raw", 4, "scd");  // four scd first: fewer than five in a row
  Add(samples, 3, 30, 40, "raw");
  samples.push_back(samples.back());
  samples.back().ok = false;  // an error counts, but is no choice
  const std::vector<LinkStepSummary> s = SummarizeLinkSteps(steps, samples);
  REQUIRE(s.size() == 4);
  CHECK(s[0].settled_mode == "raw");
  CHECK_FALSE(s[0].changed);
  CHECK(s[1].settled_mode == "scd");
  CHECK(s[1].changed);
  CHECK(s[1].start_seconds == 10);
  CHECK(s[1].switch_seconds == Approx(1.2));
  CHECK(s[1].ttft_p50_ms == 9);
  CHECK(s[1].chosen == "scd ×87, raw ×13");
  CHECK(s[2].changed);
  CHECK(s[2].switch_seconds == Approx(0.4));
  CHECK_FALSE(s[3].changed);
  CHECK(s[3].errors == 1);
  CHECK(s[3].requests == 101);
  const std::string md = LinkStepsMarkdown(s);
  INFO(md);
  CHECK(md.find("| 10 | 0.1 | 100 | 0 | scd | yes | 1.20 |") != std::string::npos);
  CHECK(md.substr(md.rfind("link_switch")) == "link_switch_seconds_max=1.20\n");

  // A step that never settles: five in a row never come.
  std::vector<LinkSample> flapping;
  Add(flapping, 0, 0, 10, "raw");
  Add(flapping, 1, 10, 20, "scd");
  for (size_t i = 100; i < flapping.size(); i += 4)
    flapping[i].mode = flapping[i].rung_name = "raw";
  const std::vector<LinkStepSummary> f = SummarizeLinkSteps({{100, 10}, {0.1, 10}}, flapping);
  CHECK(f[1].changed);
  CHECK(f[1].switch_seconds < 0);
  const std::string fmd = LinkStepsMarkdown(f);
  CHECK(fmd.substr(fmd.rfind("link_switch")) == "link_switch_seconds_max=inf\n");
}

}  // namespace
}  // namespace scd::e2e
