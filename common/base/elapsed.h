// Elapsed wall time on the steady clock in milliseconds: the stage timings that the daemons,
// the codec's GPU rebuild and the evaluation report.
#ifndef SCD_COMMON_BASE_ELAPSED_H_
#define SCD_COMMON_BASE_ELAPSED_H_

#include <chrono>

namespace scd {

inline double MsBetween(std::chrono::steady_clock::time_point a,
                        std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

inline double MsSince(std::chrono::steady_clock::time_point t) {
  return MsBetween(t, std::chrono::steady_clock::now());
}

}  // namespace scd

#endif  // SCD_COMMON_BASE_ELAPSED_H_
