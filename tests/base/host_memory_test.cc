// HostMemoryAvailable: MemAvailable from /proc/meminfo, within the room a memory cgroup's
// limit leaves (its usage less the reclaimable inactive file cache). Parsed from fixed texts,
// then read on this machine against /proc/meminfo.
#include "common/base/host_memory.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/base/file_io.h"

namespace scd {
namespace {

TEST_CASE("ParseMemAvailable reads the MemAvailable line in bytes; refuses text without one",
          "[cpu]") {
  const std::string meminfo =
      "MemTotal:       24576000 kB\nMemFree:        20000000 kB\n"
      "MemAvailable:   22942376 kB\nBuffers:          123 kB\n";
  absl::StatusOr<int64_t> a = ParseMemAvailable(meminfo);
  REQUIRE(a.ok());
  CHECK(*a == int64_t{22942376} * 1024);
  for (const char* bad : {"MemTotal: 1 kB\n", "MemAvailable: lots kB\n", "MemAvailable: 12\n",
                          "MemAvailable: -5 kB\n", ""}) {
    INFO(bad);
    absl::StatusOr<int64_t> refused = ParseMemAvailable(bad);
    REQUIRE(!refused.ok());
    CHECK(refused.status().message().find("MemAvailable") != std::string_view::npos);
  }
}

TEST_CASE(
    "CgroupRoom is the limit less the usage without its inactive file cache; none without a "
    "limit",
    "[cpu]") {
  // cgroup v2: memory.max, memory.current, memory.stat.
  CHECK(CgroupRoom("8589934592\n", "3221225472\n", "anon 2147483648\ninactive_file 1073741824\n") ==
        int64_t{8589934592} - (int64_t{3221225472} - int64_t{1073741824}));
  CHECK(CgroupRoom("max\n", "3221225472\n", "") == std::nullopt);
  // cgroup v1: no limit is the largest page-aligned int64; total_inactive_file in memory.stat.
  CHECK(CgroupRoom("9223372036854771712\n", "3990929408\n", "") == std::nullopt);
  CHECK(CgroupRoom("4294967296", "1000", "cache 500\ntotal_inactive_file 400\n") ==
        int64_t{4294967296} - 600);
  // Over the limit (or all of it in use): no room. Inactive cache never counts below zero.
  CHECK(CgroupRoom("1000", "5000", "") == 0);
  CHECK(CgroupRoom("1000", "100", "inactive_file 900\n") == 1000);
  CHECK(CgroupRoom("not a number", "100", "") == std::nullopt);
}

TEST_CASE("HostMemoryAvailable on this machine is positive and at most MemAvailable", "[cpu]") {
  absl::StatusOr<std::string> meminfo = ReadFileToString("/proc/meminfo");
  if (!meminfo.ok()) {
    CHECK(HostMemoryAvailable().status().code() == absl::StatusCode::kUnimplemented);
    return;
  }
  absl::StatusOr<int64_t> total = ParseMemAvailable(*meminfo);
  REQUIRE(total.ok());
  absl::StatusOr<int64_t> now = HostMemoryAvailable();
  REQUIRE(now.ok());
  CHECK(*now > 0);
  // Both move with the machine's load; a margin of a quarter of MemAvailable covers that.
  CHECK(*now <= *total + *total / 4);
}

}  // namespace
}  // namespace scd
