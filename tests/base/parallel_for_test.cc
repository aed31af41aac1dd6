// ParallelFor runs every item exactly once for any thread count; ResizeWithHugePages gives
// zero-filled storage of the requested size on both its small and its huge-page path;
// NewFloatsWithHugePages gives storage in pages of its own, only touched when written.
#include "common/base/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/huge_pages.h"

namespace scd {
namespace {

TEST_CASE("ParallelFor runs each item exactly once", "[cpu]") {
  for (size_t threads : {size_t{0}, size_t{1}, size_t{3}, size_t{64}}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}}) {
      std::vector<std::atomic<int>> hits(count);
      ParallelFor(
          count, [&](size_t i) { hits[i].fetch_add(1); }, threads);
      for (size_t i = 0; i < count; ++i) REQUIRE(hits[i].load() == 1);
    }
  }
}

TEST_CASE("ResizeWithHugePages yields zeros of the requested size", "[cpu]") {
  for (size_t n : {size_t{0}, size_t{10}, size_t{1} << 19, (size_t{3} << 20) + 7}) {
    std::vector<float> v(5, 2.0f);
    ResizeWithHugePages(v, n);
    REQUIRE(v.size() == n);
    for (size_t i = 5; i < n; ++i) REQUIRE(v[i] == 0.0f);
    if (n * sizeof(float) >= (size_t{2} << 20)) {
      for (size_t i = 0; i < 5; ++i) REQUIRE(v[i] == 0.0f);  // reallocated: fresh zeros
    }
    if (!v.empty()) v.back() = 1.0f;  // writable to the end
  }
}

// Sanitizers' allocators poison the shadow of what they hand out (an eighth of its size),
// may fill its first bytes, and map fresh regions for page-aligned requests (10 faults for a
// 4 KB one under ASan), so there only a bound well below touching every page holds.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kPlainAllocator = false;
#else
constexpr bool kPlainAllocator = true;
#endif

TEST_CASE("NewFloatsWithHugePages touches no page until it is written", "[cpu]") {
  for (size_t n : {size_t{10}, size_t{1} << 19, (size_t{16} << 20) + 7}) {
    INFO(n << " floats");
    const long before = MinorPageFaults();
    HugeFloats p = NewFloatsWithHugePages(n);
    // Pages of its own: 4 KB-aligned, and 2 MB-aligned from 2 MB up.
    const uintptr_t at = reinterpret_cast<uintptr_t>(p.get());
    CHECK(at % 4096 == 0);
    CHECK((n * sizeof(float) < (size_t{2} << 20) || at % (size_t{2} << 20) == 0));
    // A 64 MB buffer zero-filled would fault 16k 4 KB pages (or 32 huge ones) here.
    const long pages = static_cast<long>(n * sizeof(float) / 4096);
    CHECK(MinorPageFaults() - before < (kPlainAllocator ? 8 : std::max(16L, pages / 2)));
    p[0] = 1.0f;  // writable at both ends
    p[n - 1] = 2.0f;
    CHECK(p[0] + p[n - 1] == 3.0f);
  }
}

}  // namespace
}  // namespace scd
