// See cuda_status.h: CUDA runtime / cuBLAS codes -> absl::Status, in this file only.
#include "kernels/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace scd::cuda {
namespace {

absl::StatusCode CodeFor(cudaError_t code) {
  switch (code) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
    case cudaErrorCallRequiresNewerDriver:
      return absl::StatusCode::kUnavailable;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidMemcpyDirection:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNotSupported:
    case cudaErrorNoKernelImageForDevice:
      return absl::StatusCode::kUnimplemented;
    case cudaErrorHostMemoryAlreadyRegistered:
      return absl::StatusCode::kAlreadyExists;
    default:
      return absl::StatusCode::kInternal;
  }
}

const char* CublasName(cublasStatus_t code) {
  switch (code) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

absl::StatusCode CodeFor(cublasStatus_t code) {
  switch (code) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return absl::StatusCode::kUnavailable;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaStatus(cudaError_t code, absl::string_view what) {
  if (code == cudaSuccess) return absl::OkStatus();
  // A failed runtime call also leaves its code as the thread's last error, which the next
  // LaunchStatus (cudaGetLastError) would report as that launch's failure. Clear it here: a
  // non-sticky error (an allocation refused, an invalid argument) belongs to this call alone.
  // A sticky one (a kernel fault) cannot be cleared and keeps failing every later call.
  (void)cudaGetLastError();
  return absl::Status(CodeFor(code), absl::StrCat(what, " failed: ", cudaGetErrorName(code), " (",
                                                  cudaGetErrorString(code), ")"));
}

absl::Status CublasStatus(cublasStatus_t code, absl::string_view what) {
  if (code == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::Status(CodeFor(code), absl::StrCat(what, " failed: ", CublasName(code)));
}

absl::Status LaunchStatus(absl::string_view kernel) {
  return CudaStatus(cudaGetLastError(), absl::StrCat("launch of ", kernel));
}

}  // namespace scd::cuda
