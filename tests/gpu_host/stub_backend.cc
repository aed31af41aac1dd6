// test_gpu_host's stand-ins of the CUDA backend hooks that sekv::GpuSekv calls
// (kernels/cuda/synthetic_backend.h): any backend counts as CUDA (the test's ShapeOnlyBackend
// carries only the model's shape; its whole-model step, Backend::DecodeMixed, is the default
// UNIMPLEMENTED one). test_cuda_host links the real ones (kernels/cuda/cuda_backend.cc)
// instead, so this file is not in it.
#include <vector>

#include "common/runtime/backend.h"
#include "kernels/cuda/op_profile.h"
#include "kernels/cuda/synthetic_backend.h"

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
