// CublasGemm: the projections of the forward pass as cuBLAS GEMMs with BF16 operands and F32
// accumulation and output (cublasGemmEx, CUBLAS_COMPUTE_32F; cuBLAS picks tensor-core kernels,
// cuBLASLt underneath). CUDA-free header.
//
// Layout: weights keep the HF layout W[out, in] row-major (ModelWeights) and are applied as
// y = x · Wᵀ, like cpu::Linear. Row-major y[M, N] is column-major yᵀ[N, M] = W · xᵀ, so the
// call is the "TN" GEMM C(N x M) = op_T(W as col-major [K, N]) · x as col-major [K, M].
#ifndef SCD_KERNELS_CUDA_GEMM_H_
#define SCD_KERNELS_CUDA_GEMM_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {

// Opens cuBLAS if it is not open yet (it is opened on first use, not at process start);
// FailedPrecondition naming the library when it cannot be loaded.
absl::Status LoadCublas();

class CublasGemm {
 public:
  // A cuBLAS handle bound to `stream` (work is enqueued there, asynchronously).
  static absl::StatusOr<std::unique_ptr<CublasGemm>> Create(StreamHandle stream);
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // y[m, n] = x[m, k] · w[n, k]ᵀ + beta · y, all row-major and dense. beta = 1 fuses the
  // residual add (y is the residual stream). Twin: cpu::Linear (on BF16-rounded x and w).
  // Decode-sized m (up to small_batch_max_rows(), kSmallBatchMaxRows of ops.h unless set lower)
  // runs LinearSmallBatch, a weight stream on the same stream, instead of cuBLAS; LinearCublas
  // always calls cuBLAS (the benchmark's comparison).
  absl::Status Linear(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                      float beta = 0.0f);
  absl::Status LinearCublas(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                            float beta = 0.0f);

  // y[m, n] = x[m, k] · w[k, n] + beta · y in F32 (cublasSgemm, pure F32 math, no TF32): the
  // consumer side's small products (SCD PATCH aligner). Row-major and dense; w is NOT
  // transposed here (it is a [k, n] matrix, as the aligner stores it). Twin: cblas_sgemm.
  absl::Status MatMulF32(const float* x, const float* w, float* y, int m, int n, int k,
                         float beta = 0.0f);

  // The largest m Linear gives LinearSmallBatch, 0 to kSmallBatchMaxRows (0: cuBLAS always).
  absl::Status set_small_batch_max_rows(int rows) {
    if (rows < 0 || rows > kSmallBatchMaxRows) {
      return absl::InvalidArgumentError(
          absl::StrCat("small_batch_max_rows must be 0 to ", kSmallBatchMaxRows, ", got ", rows));
    }
    small_batch_max_rows_ = rows;
    return absl::OkStatus();
  }
  int small_batch_max_rows() const { return small_batch_max_rows_; }

  StreamHandle stream() const { return stream_; }
  // Device bytes of the workspace it gave cuBLAS (kWorkspaceBytes; 0 over the stand-ins).
  size_t workspace_bytes() const { return workspace_.size(); }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  CublasGemm(void* handle, StreamHandle stream) : handle_(handle), stream_(stream) {}
  void* handle_;  // cublasHandle_t
  StreamHandle stream_;
  DeviceBuffer workspace_;  // cublasSetWorkspace; freed after ~CublasGemm destroys the handle
  int small_batch_max_rows_ = kSmallBatchMaxRows;
};

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_GEMM_H_
