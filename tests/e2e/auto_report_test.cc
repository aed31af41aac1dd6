// The e2e bench's auto comparison on hand-built cells: the rival is the fastest fixed mode that
// meets the floor by the quality record (the oracle always does), the ratio is auto's p50 over
// its, and the report ends with the worst group's ratio.
#include "common/tools/e2e/auto_report.h"

#include <catch2/catch.hpp>

#include "tests/test_support.h"

namespace scd::e2e {
namespace {

E2eCell Cell(const std::string& mode, double gbps, const std::string& cache, double p50) {
  E2eCell c;
  c.mode = mode;
  c.bandwidth_gbps = gbps;
  c.cache = cache;
  c.requests = 20;
  c.ttft_p50_ms = p50;
  return c;
}

TEST_CASE("auto is compared with the fastest fixed mode that meets the floor", "[cpu]") {
  const std::vector<QualityRecord> quality = {
      {"oracle", 0, 0, 1, 4.5}, {"raw", 0, 0.08, 0.93, 648}, {"scd", 0, 0.02, 0.96, 198}};
  CHECK(MeetsFloor("oracle", 1.0, quality));
  CHECK(MeetsFloor("scd", 0.95, quality));
  CHECK_FALSE(MeetsFloor("raw", 0.95, quality));
  CHECK_FALSE(MeetsFloor("quant8", 0.5, quality));  // no record: not known to meet it

  std::vector<E2eCell> cells = {Cell("oracle", 1, "warm", 20),  Cell("raw", 1, "warm", 4),
                                Cell("scd", 1, "warm", 8),      Cell("auto", 1, "warm", 8.4),
                                Cell("oracle", 10, "cold", 20), Cell("scd", 10, "cold", 30),
                                Cell("auto", 10, "cold", 21)};
  cells[3].chosen = {{"scd r16/24 k3", 15}, {"oracle", 5}};
  const std::vector<AutoGroup> groups = CompareAuto(cells, 0.95, quality);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].best_mode == "scd");  // raw is faster, but below the floor
  CHECK(groups[0].ratio == Approx(8.4 / 8));
  CHECK(groups[0].chosen == "scd r16/24 k3 x15, oracle x5");
  CHECK(groups[1].best_mode == "oracle");
  CHECK(groups[1].ratio == Approx(21.0 / 20));
  const std::string md = AutoMarkdown(groups);
  CHECK(md.find("auto_vs_best_fixed_max=1.050\n") != std::string::npos);
  const std::string png = testing::TempDir() + "/auto.png";
  REQUIRE(WriteAutoPlot(groups, "test", png).ok());
  CHECK(testing::ReadFileOrFail(png).substr(1, 3) == "PNG");
}

}  // namespace
}  // namespace scd::e2e
