// See gemm.h. The one file that calls cuBLAS.
#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

cublasHandle_t AsHandle(void* h) { return static_cast<cublasHandle_t>(h); }

}  // namespace

absl::StatusOr<std::unique_ptr<CublasGemm>> CublasGemm::Create(StreamHandle stream) {
  cublasHandle_t handle = nullptr;
  absl::Status s = CublasStatus(cublasCreate(&handle), "cublasCreate");
  if (!s.ok()) return s;
  std::unique_ptr<CublasGemm> gemm(new CublasGemm(handle, stream));
  s = CublasStatus(cublasSetStream(handle, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  if (!s.ok()) return s;
  // Tensor cores for BF16 with F32 accumulation are the default math; pointer mode host.
  s = CublasStatus(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
  if (!s.ok()) return s;
  // A workspace of our own (the size cuBLAS recommends for Hopper), so that a GEMM recorded
  // into a CUDA graph (the decode step's) never allocates one during the capture.
  absl::StatusOr<DeviceBuffer> workspace =
      DeviceBuffer::Allocate(kWorkspaceBytes, "cuBLAS workspace");
  if (!workspace.ok()) return workspace.status();
  gemm->workspace_ = std::move(workspace).value();
  s = CublasStatus(cublasSetWorkspace(handle, gemm->workspace_.data(), kWorkspaceBytes),
                   "cublasSetWorkspace");
  if (!s.ok()) return s;
  return gemm;
}

CublasGemm::~CublasGemm() {
  if (handle_ != nullptr) (void)cublasDestroy(AsHandle(handle_));
}

absl::Status CublasGemm::Linear(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                                float beta) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  if (m <= small_batch_max_rows_ && LinearSmallBatchSupports(x, w, m, k))
    return LinearSmallBatch(x, w, y, m, n, k, beta, stream_);
  return LinearCublas(x, w, y, m, n, k, beta);
}

absl::Status CublasGemm::LinearCublas(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                                      float beta) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  const float alpha = 1.0f;
  return CublasStatus(cublasGemmEx(AsHandle(handle_), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w,
                                   CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, y, CUDA_R_32F, n,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      absl::StrCat("cublasGemmEx(m=", m, ", n=", n, ", k=", k, ")"));
}

absl::Status CublasGemm::MatMulF32(const float* x, const float* w, float* y, int m, int n, int k,
                                   float beta) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  const float alpha = 1.0f;
  // Row-major y[m, n] is column-major yᵀ[n, m] = wᵀ · xᵀ, where row-major w[k, n] is
  // column-major wᵀ [n, k] (ld n) and row-major x[m, k] is column-major xᵀ [k, m] (ld k).
  return CublasStatus(cublasSgemm(AsHandle(handle_), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, w,
                                  n, x, k, &beta, y, n),
                      absl::StrCat("cublasSgemm(m=", m, ", n=", n, ", k=", k, ")"));
}

}  // namespace scd::cuda
