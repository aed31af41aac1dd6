// ProcStatusKib: one memory line of /proc/<pid>/status ("VmRSS", "VmHWM", ...), in KiB: what the
// load generator, the registry benchmark and the cold-start benchmark read of a process.
#ifndef SCD_COMMON_BASE_PROC_STATUS_H_
#define SCD_COMMON_BASE_PROC_STATUS_H_

#include <cstdint>
#include <string_view>

namespace scd {

// `field` of /proc/<pid>/status (pid 0: this process) in KiB, e.g. "VmRSS"; -1 when the file
// or the field cannot be read.
int64_t ProcStatusKib(int pid, std::string_view field);

}  // namespace scd

#endif  // SCD_COMMON_BASE_PROC_STATUS_H_
