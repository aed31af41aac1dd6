// The e2e bench's passes: each pass runs every cell once, and over as many passes as there are
// modes every mode runs first once, so that a host's slow drift falls on every mode alike.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "common/tools/e2e/e2e_bench.h"

namespace scd::e2e {
namespace {

std::string Name(const E2eCellKey& k) {
  return k.mode + "@" + std::to_string(k.bandwidth_gbps) + (k.warm ? "w" : "c");
}

TEST_CASE("Every pass runs every cell once, with the modes rotated", "[cpu]") {
  E2eBenchOptions o;
  o.modes = {"oracle", "scd", "auto"};
  o.bandwidths_gbps = {0.1, 10};
  const std::vector<E2eCellKey> report = E2eCellOrder(o, 0);
  REQUIRE(report.size() == 3 * 2 * 2);
  CHECK(Name(report[0]) == Name({"oracle", 0.1, true}));
  CHECK(Name(report[1]) == Name({"oracle", 0.1, false}));
  CHECK(Name(report.back()) == Name({"auto", 10, false}));

  std::set<std::string> all;
  for (const E2eCellKey& k : report) all.insert(Name(k));
  std::map<std::string, int> first;  // the mode a pass starts with
  std::map<std::string, int> last;
  for (int pass = 0; pass < 3; ++pass) {
    const std::vector<E2eCellKey> order = E2eCellOrder(o, pass);
    std::set<std::string> seen;
    for (const E2eCellKey& k : order) seen.insert(Name(k));
    CHECK(order.size() == report.size());
    CHECK(seen == all);
    ++first[order.front().mode];
    ++last[order.back().mode];
  }
  CHECK(first == std::map<std::string, int>{{"oracle", 1}, {"scd", 1}, {"auto", 1}});
  CHECK(last == std::map<std::string, int>{{"oracle", 1}, {"scd", 1}, {"auto", 1}});
  // A fourth pass starts over.
  CHECK(Name(E2eCellOrder(o, 3).front()) == Name(report.front()));
}

TEST_CASE("A pass keeps to the cache settings asked for", "[cpu]") {
  E2eBenchOptions o;
  o.modes = {"oracle", "auto"};
  o.bandwidths_gbps = {1};
  o.warm = false;
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<E2eCellKey> order = E2eCellOrder(o, pass);
    REQUIRE(order.size() == 2);
    for (const E2eCellKey& k : order) CHECK_FALSE(k.warm);
    CHECK(order[0].mode == (pass == 0 ? "oracle" : "auto"));
  }
}

}  // namespace
}  // namespace scd::e2e
