// test_gpu_host's stand-ins of the CUDA backend hooks that sekv::GpuSekv calls
// (common/runtime/cuda/backend_access.h, kernel_choices.h, op_profiling.h): any backend counts as
// CUDA (the test's ShapeOnlyBackend carries only the model's shape; its whole-model step,
// Backend::DecodeMixed, is the default UNIMPLEMENTED one). test_cuda_host links the real ones
// (common/runtime/cuda/cuda_backend.cc) instead, so this file is not in it.
#include <vector>

#include "common/runtime/backend.h"
#include "common/runtime/cuda/backend_access.h"
#include "common/runtime/cuda/kernel_choices.h"
#include "common/runtime/cuda/op_profiling.h"
#include "kernels/cuda/op_profile.h"

namespace scd::cuda {

bool IsCudaBackend(const Backend&) { return true; }

absl::StatusOr<int> CudaBackendDevice(const Backend&) { return 0; }

absl::StatusOr<KernelChoices> KernelChoicesOf(const Backend&) { return KernelChoices{}; }

// A clock that stays off: test_gpu_host never profiles.
absl::StatusOr<OpClock*> OpClockOf(Backend&) {
  static OpClock off;
  return &off;
}

}  // namespace scd::cuda
