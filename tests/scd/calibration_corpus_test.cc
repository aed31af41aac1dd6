// The held-back split: one consumer holds back the last passages of its domain; several
// consumers each hold back their own (none twice), and every passage held by none trains.
#include "common/scd/calibration_corpus.h"

#include <catch2/catch.hpp>

namespace scd {
namespace {

// Passage i is {i}; sources alternate 0, 1, 2, 0, 1, 2, ...
std::vector<std::vector<int32_t>> Passages(int n, std::vector<int>* sources) {
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < n; ++i) {
    p.push_back({i});
    sources->push_back(i % 3);
  }
  return p;
}

std::vector<int32_t> Ids(const std::vector<std::vector<int32_t>>& ps) {
  std::vector<int32_t> ids;
  for (const auto& p : ps) ids.push_back(p[0]);
  return ids;
}

TEST_CASE("One consumer holds back the last passages of its domain", "[cpu]") {
  std::vector<int> sources;
  auto passages = Passages(12, &sources);
  std::vector<std::vector<int32_t>> train, held;
  SplitHeldOut(passages, sources, {1}, 2, &train, &held);
  CHECK(Ids(held) == std::vector<int32_t>{7, 10});
  CHECK(train.size() == 10);
  SplitHeldOut(passages, sources, {}, 3, &train, &held);
  CHECK(Ids(held) == std::vector<int32_t>{9, 10, 11});
}

TEST_CASE("Several consumers each hold back their own, and the rest trains", "[cpu]") {
  std::vector<int> sources;
  auto passages = Passages(12, &sources);
  std::vector<std::vector<int32_t>> train;
  std::vector<std::vector<std::vector<int32_t>>> held;
  // Consumer 0 from source 1, consumer 1 from sources 1 and 2, consumer 2 from any.
  SplitHeldOutPerConsumer(passages, sources, {{1}, {1, 2}, {}}, 2, &train, &held);
  REQUIRE(held.size() == 3);
  CHECK(Ids(held[0]) == std::vector<int32_t>{7, 10});
  CHECK(Ids(held[1]) == std::vector<int32_t>{8, 11});
  CHECK(Ids(held[2]) == std::vector<int32_t>{6, 9});
  CHECK(Ids(train) == std::vector<int32_t>{0, 1, 2, 3, 4, 5});
}

}  // namespace
}  // namespace scd
