// scd-eval --online's library with real daemons: the shadow oracle's statistics read from a
// decode daemon's /metrics agree with the same comparisons made in-process, on the same bAbI
// prompts, and nothing was dropped.
#include "common/tools/e2e/online_eval.h"

#include <catch2/catch.hpp>

#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {

TEST_CASE("The shadow oracle's online figures equal the offline comparison's", "[daemons]") {
  e2e::OnlineEvalOptions o;
  o.base_model = ModelDir("stories260K");
  o.specialist_model = ModelDir("stories260K-babi-qa");
  o.artifact = ArtifactPath();
  o.bin_dir = SCD_BIN_DIR;
  o.workdir = TempDir();
  o.babi_files = SharedPath("data/babi/qa1_single-supporting-fact_dev.txt");
  o.max_prompts = 6;
  o.tokens = 8;
  auto report = e2e::RunOnlineEval(o, nullptr);
  INFO(report.status());
  REQUIRE(report.ok());
  INFO(report->Markdown());
  CHECK(report->online.samples == 6);
  CHECK(report->offline.samples == 6);
  CHECK(report->dropped == 0);
  CHECK(report->max_abs_difference < 1e-4);
  CHECK(report->online.kl > 0);  // scd is lossy, and the comparison sees it
  CHECK(report->online.top1 > 0.5);
  CHECK(report->online.k_rel_error.size() == 5);  // stories260K's layers
}

}  // namespace scd::testing
