// CudaBackend factory declaration. The implementation lives in common/runtime/cuda/
// (cuda_backend.cc) and is only linked when the build has CUDA; this header stays free of CUDA
// includes so that CPU-only code can name it. Only backend.cc calls it, under SCD_HAVE_CUDA.
#ifndef SCD_COMMON_RUNTIME_CUDA_CUDA_BACKEND_H_
#define SCD_COMMON_RUNTIME_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/runtime/backend.h"

namespace scd {

// Number of usable CUDA devices (0 when no driver or device is present).
int CudaDeviceCount();

// OK when a CUDA device is usable; otherwise UNAVAILABLE, "no usable CUDA device: <why>": no
// driver, a driver older than the build's CUDA runtime, or none visible to it.
absl::Status CudaDeviceStatus();

// Uploads `model` to the current CUDA device (weights as BF16, norms F32) and returns a
// Backend running on it, with `options`' decode graphs. CudaDeviceStatus()'s UNAVAILABLE when
// there is no usable device.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                           const BackendOptions& options = {});

}  // namespace scd

#endif  // SCD_COMMON_RUNTIME_CUDA_CUDA_BACKEND_H_
