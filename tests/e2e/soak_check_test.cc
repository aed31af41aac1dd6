// EvaluateSoak on hand-built loadgen reports: each criterion passes and fails where it should.
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "common/tools/e2e/soak.h"

namespace scd::e2e {
namespace {

// A report with `issued` requests (`failed` of them failed), RSS samples every 10 s for
// 600 s from `rss(daemon, t)`, and a first/last-minute p99 of 100 ms and `last_p99` ms.
nlohmann::json Report(int64_t issued, int64_t failed, double last_p99,
                      const std::function<double(int, double)>& rss) {
  nlohmann::json r;
  r["requests"] = {{"issued", issued}, {"ok", issued - failed}, {"failed", failed}, {"lost", 0}};
  nlohmann::json samples = nlohmann::json::array();
  for (double t = 0; t <= 600; t += 10) {
    samples.push_back({{"t_s", t}, {"kib", {rss(0, t), rss(1, t)}}, {"client_kib", 1000}});
  }
  r["timeseries"] = {{"rss_samples", samples}};
  r["ttft_drift"] = {{"first_p99_ms", 100.0},
                     {"last_p99_ms", last_p99},
                     {"first_count", 600},
                     {"last_count", 600},
                     {"relative_change", (last_p99 - 100.0) / 100.0}};
  return r;
}

const SoakCheck& Find(const std::vector<SoakCheck>& checks, const std::string& prefix) {
  for (const SoakCheck& c : checks) {
    if (c.name.rfind(prefix, 0) == 0) return c;
  }
  FAIL("no check named " << prefix);
  return checks.front();
}

TEST_CASE("Soak checks: flat RSS with bursts passes, a leak and a p99 rise fail", "[cpu]") {
  SoakOptions o;  // 60 s warm-up and windows, 5% RSS, 10% drift
  const std::vector<std::string> daemons = {"prefill", "decode-0"};
  // 30 MiB floor with a +40% burst every 100 s: window medians stay at the floor.
  auto bursty = [](int, double t) {
    return (static_cast<int>(t) % 100 == 50 ? 42.0 : 30.0) * 1024;
  };
  std::vector<SoakCheck> checks =
      EvaluateSoak(o, Report(1000, 0, 105, bursty), daemons, {true, true});
  CHECK(Find(checks, "zero failed").passed);
  CHECK(Find(checks, "every daemon").passed);
  const SoakCheck& rss = Find(checks, "RSS flat");
  CHECK(rss.passed);
  CHECK_THAT(rss.detail, Catch::Contains("peak sample 42.0 MiB"));
  CHECK(Find(checks, "p99 TTFT drift").passed);

  // decode-0 grows 2% a minute: by the last window it is ~18% up.
  auto leak = [](int d, double t) { return (d == 1 ? 30.0 * (1 + 0.02 * t / 60) : 30.0) * 1024; };
  checks = EvaluateSoak(o, Report(1000, 0, 112, leak), daemons, {true, false});
  const SoakCheck& leaked = Find(checks, "RSS flat");
  CHECK_FALSE(leaked.passed);
  CHECK_THAT(leaked.detail, Catch::Contains("decode-0"));
  CHECK_FALSE(Find(checks, "p99 TTFT drift").passed);  // +12%
  CHECK_FALSE(Find(checks, "every daemon").passed);
  CHECK_THAT(Find(checks, "every daemon").detail, Catch::Contains("decode-0"));

  // p99 TTFT improving is not drift, however far it falls: 100 -> 73.4 ms (-26.6%) passes.
  checks = EvaluateSoak(o, Report(1000, 0, 73.4, bursty), daemons, {true, true});
  const SoakCheck& fell = Find(checks, "p99 TTFT drift");
  CHECK(fell.passed);
  CHECK_THAT(fell.detail, Catch::Contains("-26.6%") && Catch::Contains("noise"));
  CHECK_THAT(fell.name, Catch::Contains("rise below 10%") && Catch::Contains("a fall passes"));
  // At the bound it fails (+10.0%); just under it passes.
  checks = EvaluateSoak(o, Report(1000, 0, 110, bursty), daemons, {true, true});
  CHECK_FALSE(Find(checks, "p99 TTFT drift").passed);
  checks = EvaluateSoak(o, Report(1000, 0, 109.9, bursty), daemons, {true, true});
  CHECK(Find(checks, "p99 TTFT drift").passed);

  checks = EvaluateSoak(o, Report(1000, 3, 100, bursty), daemons, {true, true});
  CHECK_FALSE(Find(checks, "zero failed").passed);
  CHECK_THAT(Find(checks, "zero failed").detail, Catch::Contains("3 failed"));
}

}  // namespace
}  // namespace scd::e2e
