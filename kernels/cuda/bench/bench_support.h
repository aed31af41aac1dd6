// What the parts of scd-gpu-bench share: host timing, medians, N(0, σ²) host arrays and
// one-off uploads. CUDA-free, like every header in kernels/cuda.
#ifndef SCD_KERNELS_CUDA_BENCH_BENCH_SUPPORT_H_
#define SCD_KERNELS_CUDA_BENCH_BENCH_SUPPORT_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "kernels/cuda/device_memory.h"

namespace scd::cuda_bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

inline double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// `count` draws of N(0, stddev²) from stream `seed` (common/base/random.h).
inline std::vector<float> Normal(size_t count, uint64_t seed, float stddev) {
  std::vector<float> v(count);
  FillNormal(v.data(), count, seed, 0.0f, stddev);
  return v;
}

// A device copy of `host` (synchronous: set-up only, never inside a timed region).
template <typename T>
absl::StatusOr<cuda::DeviceBuffer> Upload(const std::vector<T>& host, absl::string_view what) {
  SCD_ASSIGN_OR_RETURN(cuda::DeviceBuffer b,
                       cuda::DeviceBuffer::Allocate(host.size() * sizeof(T), what));
  SCD_RETURN_IF_ERROR(cuda::CopyToDeviceSync(b.data(), host.data(), host.size() * sizeof(T)));
  return b;
}

}  // namespace scd::cuda_bench

#endif  // SCD_KERNELS_CUDA_BENCH_BENCH_SUPPORT_H_
