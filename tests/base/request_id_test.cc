// NewRequestId: 32 lowercase hex characters, distinct across draws and threads, every hex
// digit used (a generator stuck on a few bits would show up as a missing digit).
#include "common/base/request_id.h"

#include <catch2/catch.hpp>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace scd {
namespace {

bool IsRequestId(const std::string& id) {
  if (id.size() != kRequestIdLength) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

TEST_CASE("Request ids are 32 lowercase hex characters, distinct across threads", "[cpu]") {
  std::set<std::string> ids;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<std::string> mine;
      for (int i = 0; i < 1000; ++i) mine.push_back(NewRequestId());
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(mine.begin(), mine.end());
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(ids.size() == 4000);
  std::set<char> digits;
  for (const std::string& id : ids) {
    INFO(id);
    REQUIRE(IsRequestId(id));
    digits.insert(id.begin(), id.end());
  }
  CHECK(digits.size() == 16);
}

}  // namespace
}  // namespace scd
