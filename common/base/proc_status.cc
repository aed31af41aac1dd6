// See proc_status.h.
#include "common/base/proc_status.h"

#include <fstream>
#include <string>

namespace scd {

int64_t ProcStatusKib(int pid, std::string_view field) {
  std::ifstream status(pid == 0 ? std::string("/proc/self/status")
                                : "/proc/" + std::to_string(pid) + "/status");
  const std::string prefix = std::string(field) + ":";
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    int64_t kib = 0;
    bool digits = false;
    for (char c : line.substr(prefix.size())) {
      if (c < '0' || c > '9') continue;
      kib = kib * 10 + (c - '0');
      digits = true;
    }
    return digits ? kib : -1;
  }
  return -1;
}

}  // namespace scd
