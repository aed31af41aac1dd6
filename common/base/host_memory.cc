// See host_memory.h.
#include "common/base/host_memory.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/base/file_io.h"

namespace scd {
namespace {

// Debian's Abseil has its own string_view.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// v1 reports "no limit" as the largest page-aligned int64; anything this large is none.
constexpr int64_t kNoLimit = int64_t{1} << 60;

std::optional<int64_t> ParseBytes(absl::string_view text) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) || v < 0) return std::nullopt;
  return v;
}

// The value of `key` in a "key value" per line text (memory.stat), or 0.
int64_t StatValue(std::string_view stat, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(View(stat), '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() == 2 && f[0] == key) return ParseBytes(f[1]).value_or(0);
  }
  return 0;
}

// The process's cgroup path for a v2 ("0::/path") or a v1 memory ("N:memory:/path") line of
// /proc/self/cgroup; empty when it has none.
std::string CgroupPath(std::string_view self_cgroup, bool v2) {
  for (absl::string_view line : absl::StrSplit(View(self_cgroup), '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    const std::vector<absl::string_view> controllers = absl::StrSplit(f[1], ',');
    const bool memory =
        std::find(controllers.begin(), controllers.end(), "memory") != controllers.end();
    if (v2 ? (f[0] == "0" && f[1].empty()) : memory) return std::string(f[2]);
  }
  return "";
}

// The room the cgroup files under `dir` leave, if they are there and set a limit.
std::optional<int64_t> RoomIn(const std::string& dir, bool v2) {
  const auto limit = ReadFileToString(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  const auto usage = ReadFileToString(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
  if (!limit.ok() || !usage.ok()) return std::nullopt;
  const auto stat = ReadFileToString(dir + "/memory.stat");
  return CgroupRoom(*limit, *usage, stat.ok() ? *stat : "");
}

// The room of the process's own memory cgroup, v2 or v1: the least any limit on the way up
// from the group /proc/self/cgroup names to the mount's root leaves (a parent's limit bounds
// its children; a container's cgroup namespace puts its own group at the root).
std::optional<int64_t> CgroupRoomNow() {
  const auto self = ReadFileToString("/proc/self/cgroup");
  std::optional<int64_t> least;
  for (bool v2 : {true, false}) {
    const std::string mount = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    std::string path = self.ok() ? CgroupPath(*self, v2) : "";
    while (!path.empty() && path.back() == '/') path.pop_back();
    for (;;) {
      if (std::optional<int64_t> room = RoomIn(mount + path, v2)) {
        least = least.has_value() ? std::min(*least, *room) : *room;
      }
      if (path.empty()) break;
      path.resize(path.rfind('/'));
    }
  }
  return least;
}

}  // namespace

absl::StatusOr<int64_t> ParseMemAvailable(std::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(View(meminfo), '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) break;
    const std::optional<int64_t> kb = ParseBytes(line);
    if (!kb.has_value() || *kb > kNoLimit / 1024) break;
    return *kb * 1024;
  }
  return absl::InvalidArgumentError("/proc/meminfo has no readable MemAvailable line");
}

std::optional<int64_t> CgroupRoom(std::string_view limit, std::string_view usage,
                                  std::string_view stat) {
  const std::optional<int64_t> l = ParseBytes(View(limit)), u = ParseBytes(View(usage));
  if (!l.has_value() || !u.has_value() || *l >= kNoLimit) return std::nullopt;
  int64_t inactive = StatValue(stat, "inactive_file");
  if (inactive == 0) inactive = StatValue(stat, "total_inactive_file");
  const int64_t working = std::max<int64_t>(0, *u - std::min(inactive, *u));
  return std::max<int64_t>(0, *l - working);
}

absl::StatusOr<int64_t> HostMemoryAvailable() {
  const auto meminfo = ReadFileToString("/proc/meminfo");
  if (!meminfo.ok()) {
    return absl::UnimplementedError(
        absl::StrCat("host memory is unknown here: ", meminfo.status().message()));
  }
  absl::StatusOr<int64_t> available = ParseMemAvailable(*meminfo);
  if (!available.ok()) return available.status();
  if (std::optional<int64_t> room = CgroupRoomNow()) return std::min(*available, *room);
  return available;
}

}  // namespace scd
