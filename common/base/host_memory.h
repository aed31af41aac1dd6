// The host memory this process can still take: what an admission budget over host memory (the
// decode engine's SEKV budget, sekv.host_memory_fraction) is a share of, measured once when the
// engine starts, as the KV budget is a share of the device's free memory.
//
// Linux: MemAvailable from /proc/meminfo (the kernel's estimate of what can be allocated
// without swapping, page cache included), lowered to the room the process's memory cgroup and
// its ancestors leave where they have limits, since a container sees the host's /proc/meminfo
// but is killed at its own limit: cgroup v2 memory.max - memory.current, or v1
// memory.limit_in_bytes - memory.usage_in_bytes, with the group's inactive file cache
// (reclaimable, counted in its usage) given back, as the kubelet counts a container's working
// set.
#ifndef SCD_COMMON_BASE_HOST_MEMORY_H_
#define SCD_COMMON_BASE_HOST_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"

namespace scd {

// Bytes available now. Unimplemented where /proc/meminfo is missing (not Linux).
absl::StatusOr<int64_t> HostMemoryAvailable();

// The parts, for tests.
// MemAvailable of a /proc/meminfo text, in bytes; InvalidArgument without a readable one.
absl::StatusOr<int64_t> ParseMemAvailable(std::string_view meminfo);
// What a memory cgroup leaves: limit - (usage - inactive file cache), at least 0; nullopt for
// no limit ("max", or v1's page-rounded 2^63) or text that is not a number.
// `stat` is the group's memory.stat ("inactive_file" in v2, "total_inactive_file" in v1).
std::optional<int64_t> CgroupRoom(std::string_view limit, std::string_view usage,
                                  std::string_view stat);

}  // namespace scd

#endif  // SCD_COMMON_BASE_HOST_MEMORY_H_
