// The GPU emulator's stand-in for <cublas_api.h>: the status codes cuda_status.cc names. GEMMs
// are not emulated (tests/gpu/standin/standin_gemm.cc computes them with the CPU twins).
#ifndef SCD_TESTS_GPU_EMU_CUBLAS_API_H_
#define SCD_TESTS_GPU_EMU_CUBLAS_API_H_

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

#endif  // SCD_TESTS_GPU_EMU_CUBLAS_API_H_
