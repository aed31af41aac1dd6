// The one place where CUDA runtime and cuBLAS error codes become absl::Status (docs/STYLE.md,
// "Errors": translate at the edges only). Internal to kernels/cuda: it includes CUDA headers,
// so only sources in this folder include it; the public headers here stay CUDA-free.
//
// Mapping: out-of-memory codes -> RESOURCE_EXHAUSTED, missing driver/device -> UNAVAILABLE,
// invalid arguments/values -> INVALID_ARGUMENT, unsupported features -> UNIMPLEMENTED,
// everything else (launch failures, illegal addresses, ...) -> INTERNAL. The message names the
// operation, the symbolic code and the runtime's own description.
#ifndef SCD_KERNELS_CUDA_CUDA_STATUS_H_
#define SCD_KERNELS_CUDA_CUDA_STATUS_H_

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace scd::cuda {

// OK for cudaSuccess; otherwise an error naming `what` (e.g. "cudaMalloc(weights)").
absl::Status CudaStatus(cudaError_t code, absl::string_view what);

// OK for CUBLAS_STATUS_SUCCESS; otherwise an error naming `what`.
absl::Status CublasStatus(cublasStatus_t code, absl::string_view what);

// The status of the last kernel launch on this thread (cudaGetLastError, which also clears
// it), naming `kernel`. Every launcher returns this right after its <<<...>>>.
absl::Status LaunchStatus(absl::string_view kernel);

}  // namespace scd::cuda

// Returns from the enclosing function when the CUDA runtime call `expr` fails.
#define SCD_CUDA_RETURN_IF_ERROR(expr)                                              \
  do {                                                                              \
    const ::absl::Status scd_cuda_status_ = ::scd::cuda::CudaStatus((expr), #expr); \
    if (!scd_cuda_status_.ok()) return scd_cuda_status_;                            \
  } while (0)

#endif  // SCD_KERNELS_CUDA_CUDA_STATUS_H_
