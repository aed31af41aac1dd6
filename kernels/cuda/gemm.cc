// See gemm.h. The one file that calls cuBLAS.
//
// cuBLAS is opened on first use (dlopen), not linked: loading libcublas and libcublasLt runs
// their static initialisers, about 0.1 s and 200 MB of peak RSS, which every CPU-only process
// of a CUDA build (a CPU daemon, scd-generate, the benchmarks) would otherwise pay at start.
#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

cublasHandle_t AsHandle(void* h) { return static_cast<cublasHandle_t>(h); }

#define SCD_CUBLAS_NAME2(x) #x
#define SCD_CUBLAS_NAME(x) SCD_CUBLAS_NAME2(x)  // the exported symbol, after cublas_v2.h's macros

// The cuBLAS entry points this file calls, resolved from the library once.
struct CublasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetPointerMode) set_pointer_mode = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  // The C entry point (C++ also sees an inline overload taking a cudaDataType compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
};

template <typename Fn>
absl::Status Resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) return absl::InternalError(absl::StrCat("cuBLAS has no symbol ", name));
  return absl::OkStatus();
}

// Opens libcublas.so.<major> from the loader's search path (the executable's run path among
// it), else from the toolkit the build used.
absl::StatusOr<void*> OpenCublas() {
  const std::string soname = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string first_error = lib == nullptr ? dlerror() : "";
#ifdef SCD_CUDA_LIBRARY_DIR
  if (lib == nullptr)
    lib = dlopen((SCD_CUDA_LIBRARY_DIR "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  if (lib == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS for the CUDA backend: ", first_error));
  }
  return lib;
}

absl::StatusOr<const CublasApi*> Cublas() {
  static std::once_flag once;
  static absl::StatusOr<const CublasApi*>* api = nullptr;
  std::call_once(once, [] {
    absl::StatusOr<void*> lib = OpenCublas();
    if (!lib.ok()) {
      api = new absl::StatusOr<const CublasApi*>(lib.status());
      return;
    }
    auto* table = new CublasApi;
    absl::Status s = Resolve(*lib, SCD_CUBLAS_NAME(cublasCreate), &table->create);
    if (s.ok()) s = Resolve(*lib, SCD_CUBLAS_NAME(cublasDestroy), &table->destroy);
    if (s.ok()) s = Resolve(*lib, SCD_CUBLAS_NAME(cublasSetStream), &table->set_stream);
    if (s.ok()) s = Resolve(*lib, SCD_CUBLAS_NAME(cublasSetPointerMode), &table->set_pointer_mode);
    if (s.ok()) s = Resolve(*lib, SCD_CUBLAS_NAME(cublasSetWorkspace), &table->set_workspace);
    if (s.ok()) s = Resolve(*lib, SCD_CUBLAS_NAME(cublasGemmEx), &table->gemm_ex);
    if (s.ok()) s = Resolve(*lib, SCD_CUBLAS_NAME(cublasSgemm), &table->sgemm);
    api = s.ok() ? new absl::StatusOr<const CublasApi*>(table)
                 : new absl::StatusOr<const CublasApi*>(s);
  });
  return *api;
}

}  // namespace

absl::Status LoadCublas() { return Cublas().status(); }

absl::StatusOr<std::unique_ptr<CublasGemm>> CublasGemm::Create(StreamHandle stream) {
  absl::StatusOr<const CublasApi*> api = Cublas();
  if (!api.ok()) return api.status();
  const CublasApi& cublas = **api;
  cublasHandle_t handle = nullptr;
  absl::Status s = CublasStatus(cublas.create(&handle), "cublasCreate");
  if (!s.ok()) return s;
  std::unique_ptr<CublasGemm> gemm(new CublasGemm(handle, stream));
  s = CublasStatus(cublas.set_stream(handle, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  if (!s.ok()) return s;
  // Tensor cores for BF16 with F32 accumulation are the default math; pointer mode host.
  s = CublasStatus(cublas.set_pointer_mode(handle, CUBLAS_POINTER_MODE_HOST),
                   "cublasSetPointerMode");
  if (!s.ok()) return s;
  // A workspace of our own (the size cuBLAS recommends for Hopper), so that a GEMM recorded
  // into a CUDA graph (the decode step's) never allocates one during the capture.
  absl::StatusOr<DeviceBuffer> workspace =
      DeviceBuffer::Allocate(kWorkspaceBytes, "cuBLAS workspace");
  if (!workspace.ok()) return workspace.status();
  gemm->workspace_ = std::move(workspace).value();
  s = CublasStatus(cublas.set_workspace(handle, gemm->workspace_.data(), kWorkspaceBytes),
                   "cublasSetWorkspace");
  if (!s.ok()) return s;
  return gemm;
}

CublasGemm::~CublasGemm() {
  // A handle exists only after Cublas() succeeded.
  if (handle_ != nullptr) (void)(*Cublas())->destroy(AsHandle(handle_));
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
  return CublasStatus((*Cublas())->gemm_ex(AsHandle(handle_), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k,
                                           &alpha, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, y,
                                           CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      absl::StrCat("cublasGemmEx(m=", m, ", n=", n, ", k=", k, ")"));
}

absl::Status CublasGemm::MatMulF32(const float* x, const float* w, float* y, int m, int n, int k,
                                   float beta) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  const float alpha = 1.0f;
  // Row-major y[m, n] is column-major yᵀ[n, m] = wᵀ · xᵀ, where row-major w[k, n] is
  // column-major wᵀ [n, k] (ld n) and row-major x[m, k] is column-major xᵀ [k, m] (ld k).
  return CublasStatus((*Cublas())->sgemm(AsHandle(handle_), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k,
                                         &alpha, w, n, x, k, &beta, y, n),
                      absl::StrCat("cublasSgemm(m=", m, ", n=", n, ", k=", k, ")"));
}

}  // namespace scd::cuda
