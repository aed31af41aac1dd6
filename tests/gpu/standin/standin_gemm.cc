// The CPU stand-in of CublasGemm (kernels/cuda/gemm.h), shared by test_cuda_host (over the
// launcher stand-ins) and test_cuda_emu (over the emulated kernels, which do not model
// cuBLAS): BF16 GEMMs widen to float and call the CPU twin, cpu::Linear; F32 GEMMs loop. Both
// queue their work on the handle's stream and check that every operand is live device memory
// (standin_memory.h). cuBLAS does not read y when beta is 0, so neither does this.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/gemm.h"
#include "tests/gpu/standin/standin_memory.h"

namespace scd::cuda {

using standin::RequireDevice;
using standin::Widen;

absl::StatusOr<std::unique_ptr<CublasGemm>> CublasGemm::Create(StreamHandle stream) {
  return std::unique_ptr<CublasGemm>(new CublasGemm(new char, stream));
}

CublasGemm::~CublasGemm() { delete static_cast<char*>(handle_); }

absl::Status CublasGemm::Linear(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                                float beta) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  standin::Enqueue(stream(), [=] {
    RequireDevice(x, int64_t{m} * k, "Linear x");
    RequireDevice(w, int64_t{n} * k, "Linear w");
    RequireDevice(y, int64_t{m} * n, "Linear y");
    const std::vector<float> xf = Widen(x, int64_t{m} * k), wf = Widen(w, int64_t{n} * k);
    std::vector<float> product(static_cast<size_t>(m) * n);
    cpu::Linear(xf.data(), wf.data(), nullptr, product.data(), m, n, k);
    for (size_t i = 0; i < product.size(); ++i) {
      // cuBLAS does not read y when beta is 0 (stale or poisoned y must not leak in).
      y[i] = beta == 0.0f ? product[i] : product[i] + beta * y[i];
    }
  });
  return absl::OkStatus();
}

// The stand-in's Linear is already the plain product whatever m is.
absl::Status CublasGemm::LinearCublas(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                                      float beta) {
  return Linear(x, w, y, m, n, k, beta);
}

absl::Status CublasGemm::MatMulF32(const float* x, const float* w, float* y, int m, int n, int k,
                                   float beta) {
  if (m <= 0 || n <= 0) return absl::OkStatus();
  standin::Enqueue(stream(), [=] {
    RequireDevice(x, int64_t{m} * k, "MatMulF32 x");
    RequireDevice(w, int64_t{k} * n, "MatMulF32 w");
    RequireDevice(y, int64_t{m} * n, "MatMulF32 y");
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int c = 0; c < k; ++c) acc += x[int64_t{i} * k + c] * w[int64_t{c} * n + j];
        float& dst = y[int64_t{i} * n + j];
        dst = beta == 0.0f ? acc : acc + beta * dst;
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace scd::cuda
