// Backend factory: the one place that knows which backends this build has (STYLE.md: `#if`
// only in the backend factory and in CMake).
#include "common/runtime/backend.h"

#include "absl/strings/str_cat.h"
#include "common/runtime/cpu_backend.h"
#if SCD_HAVE_CUDA
#include "common/runtime/cuda_backend.h"
#endif

namespace scd {

bool BackendAvailable(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu:
      return true;
    case BackendKind::kCuda:
#if SCD_HAVE_CUDA
      return CudaDeviceCount() > 0;
#else
      return false;
#endif
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind,
                                                       std::shared_ptr<const Model> model) {
  switch (kind) {
    case BackendKind::kCpu:
      return CreateCpuBackend(std::move(model));
    case BackendKind::kCuda:
#if SCD_HAVE_CUDA
      return CreateCudaBackend(std::move(model));
#else
      return absl::UnavailableError(
          "this build has no CUDA backend (configure with -DSCD_CUDA=ON on a machine with nvcc)");
#endif
  }
  return absl::InvalidArgumentError("unknown backend kind");
}

absl::StatusOr<BackendKind> ParseBackendKind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", std::string(name), "' (expected cpu or cuda)"));
}

}  // namespace scd
