// What the parts of scd-gpu-bench share: host timing, medians, N(0, σ²) host arrays, one-off
// uploads, and for the parts that time single calls a stream with its event timer (Rig) and
// the best-of-5 timing loop. CUDA-free, like every header in kernels/cuda.
#ifndef SCD_COMMON_TOOLS_BENCH_GPU_BENCH_SUPPORT_H_
#define SCD_COMMON_TOOLS_BENCH_GPU_BENCH_SUPPORT_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm.h"

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

// A stream with its event timer and, where asked, a cuBLAS handle on it: a part's set-up.
struct Rig {
  std::unique_ptr<cuda::Stream> stream;
  std::unique_ptr<cuda::StreamTimer> timer;
  std::unique_ptr<cuda::CublasGemm> gemm;
  cuda::StreamHandle handle() const { return stream->handle(); }
};

inline absl::StatusOr<Rig> MakeRig(bool with_gemm) {
  Rig rig;
  SCD_ASSIGN_OR_RETURN(rig.stream, cuda::Stream::Create());
  SCD_ASSIGN_OR_RETURN(rig.timer, cuda::StreamTimer::Create());
  if (with_gemm) {
    SCD_ASSIGN_OR_RETURN(rig.gemm, cuda::CublasGemm::Create(rig.handle()));
  }
  return rig;
}

// Milliseconds of one call of `op` (absl::Status op(int call)), the best of 5 timings (after
// one warm-up) of `calls` back-to-back calls, so that short kernels are timed without the
// launch gaps in between.
template <typename Op>
absl::StatusOr<float> BestMsPerCall(const Rig& rig, int calls, Op op) {
  float best_ms = 1e30f;
  for (int rep = 0; rep < 6; ++rep) {
    SCD_RETURN_IF_ERROR(rig.timer->Start(rig.handle()));
    for (int i = 0; i < calls; ++i) SCD_RETURN_IF_ERROR(op(i));
    SCD_ASSIGN_OR_RETURN(const float ms, rig.timer->StopMs(rig.handle()));
    if (rep > 0) best_ms = std::min(best_ms, ms / calls);
  }
  return best_ms;
}

}  // namespace scd::cuda_bench

#endif  // SCD_COMMON_TOOLS_BENCH_GPU_BENCH_SUPPORT_H_
