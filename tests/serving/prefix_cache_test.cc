// PrefixCache: longest-prefix hits, isolation by pair and mode, LRU eviction under the byte
// cap, and never a hit for a prompt that only collides in hash.
#include "common/serving/prefix_cache.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

namespace scd {

TEST_CASE("Prefix cache returns the longest cached prefix of the same pair and mode", "[cpu]") {
  PrefixCache cache(1 << 20);
  cache.Insert("pairA", 6, {1, 2, 3}, {9, 9});
  cache.Insert("pairA", 6, {1, 2, 3, 4, 5}, {8, 8, 8});
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7};
  auto hit = cache.Lookup("pairA", 6, prompt);
  REQUIRE(hit);
  CHECK(hit.length == 5);
  CHECK(hit.entry->tokens.size() == 5);
  CHECK(hit.entry->payload == std::vector<uint8_t>{8, 8, 8});
  // The prompt must extend the prefix by at least one token.
  CHECK(cache.Lookup("pairA", 6, std::vector<int32_t>{1, 2, 3, 4, 5}).length == 3);
  CHECK(!cache.Lookup("pairA", 6, std::vector<int32_t>{1, 2, 3}));
  CHECK(!cache.Lookup("pairB", 6, prompt));
  CHECK(!cache.Lookup("pairA", 1, prompt));
  CHECK(!cache.Lookup("pairA", 6, std::vector<int32_t>{1, 2, 4, 4, 5, 6}));
  CHECK(!cache.Lookup("pairA", 6, prompt, /*min_tokens=*/6));
  const auto s = cache.stats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 5);
  CHECK(s.entries == 2);
}

TEST_CASE("Prefix cache finds block-aligned prefixes inside longer entries", "[cpu]") {
  PrefixCache cache(1 << 20, /*block_tokens=*/4);
  // A shared context of 9 tokens, then a question.
  std::vector<int32_t> first = {1, 2, 3, 4, 5, 6, 7, 8, 9, 50, 51, 52};
  cache.Insert("p", 6, first, {7});
  // Another question after the same context: the longest aligned shared prefix is 8 tokens.
  const std::vector<int32_t> second = {1, 2, 3, 4, 5, 6, 7, 8, 9, 60, 61};
  auto hit = cache.Lookup("p", 6, second);
  REQUIRE(hit);
  CHECK(hit.length == 8);
  CHECK(hit.partial());
  CHECK(hit.entry->tokens == first);
  // Sharing less than one block is a miss; the whole entry is still an exact hit.
  CHECK(!cache.Lookup("p", 6, std::vector<int32_t>{1, 2, 3, 9, 9}));
  first.push_back(99);
  auto exact = cache.Lookup("p", 6, first);
  REQUIRE(exact);
  CHECK(exact.length == 12);
  CHECK(!exact.partial());
  CHECK(cache.stats().partial_hits == 1);
  // Eviction removes the block index too.
  cache.Insert("p", 6, {100, 101}, std::vector<uint8_t>(1 << 20, 0));  // too large: ignored
  PrefixCache small(60, 4);
  small.Insert("p", 6, {1, 2, 3, 4, 5, 6}, std::vector<uint8_t>(20, 0));
  small.Insert("p", 6, {9, 9, 9, 9, 9, 9}, std::vector<uint8_t>(20, 0));  // evicts the first
  CHECK(!small.Lookup("p", 6, std::vector<int32_t>{1, 2, 3, 4, 7, 7}));
  CHECK(static_cast<bool>(small.Lookup("p", 6, std::vector<int32_t>{9, 9, 9, 9, 7, 7})));
}

TEST_CASE("Prefix cache evicts least recently used entries under its byte cap", "[cpu]") {
  // Each entry: 100 payload bytes + 4 tokens * 4 bytes = 116 bytes; the cap holds two.
  PrefixCache cache(240);
  auto insert = [&](int32_t first) {
    cache.Insert("p", 0, {first, 2, 3, 4}, std::vector<uint8_t>(100, 1));
  };
  insert(10);
  insert(20);
  REQUIRE(static_cast<bool>(
      cache.Lookup("p", 0, std::vector<int32_t>{10, 2, 3, 4, 5})));  // 10 is fresh
  insert(30);                                                        // evicts 20
  CHECK(!cache.Lookup("p", 0, std::vector<int32_t>{20, 2, 3, 4, 5}));
  CHECK(static_cast<bool>(cache.Lookup("p", 0, std::vector<int32_t>{10, 2, 3, 4, 5})));
  CHECK(static_cast<bool>(cache.Lookup("p", 0, std::vector<int32_t>{30, 2, 3, 4, 5})));
  CHECK(cache.stats().evictions == 1);
  CHECK(cache.stats().bytes <= 240);
  cache.Insert("p", 0, {1, 2}, std::vector<uint8_t>(1000, 0));  // larger than the cap
  CHECK(cache.stats().entries == 2);
}

TEST_CASE("Prefix cache is safe under concurrent use", "[cpu]") {
  PrefixCache cache(1 << 16);
  // Catch2 v2 assertions are not thread-safe: the workers count, the test thread checks.
  std::atomic<int> hits{0};
  std::atomic<int> wrong_owner{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        std::vector<int32_t> tokens = {t, i % 17, 3};
        cache.Insert("p", 0, tokens, std::vector<uint8_t>(50, static_cast<uint8_t>(i)));
        tokens.push_back(9);
        auto hit = cache.Lookup("p", 0, tokens);
        if (!hit) continue;
        ++hits;
        if (hit.entry->tokens[0] != t) ++wrong_owner;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(hits.load() > 0);
  CHECK(wrong_owner.load() == 0);
  CHECK(cache.stats().bytes <= (1 << 16));
}

}  // namespace scd
