// The PATCH aligner's forward pass on the device (scd_sekv_ops.h): host code that queues
// three cuBLAS F32 GEMMs and the elementwise kernels of scd_codec.cu. CUDA-free, so that the
// host tests (tests/gpu/standin/, test_cuda_host) run this very code over CPU stand-ins of
// those launchers.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda {

absl::Status PatchAlignerForward(CublasGemm& gemm, const DeviceAlignerView& f, const float* z,
                                 int rows, float* hidden, float* h) {
  if (rows <= 0) return absl::OkStatus();
  if (f.code_dim <= 0 || f.out_dim <= 0 || f.hidden_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("aligner has an empty shape (code ", f.code_dim, ", out ", f.out_dim, ")"));
  }
  if (f.hidden_dim > 0 && hidden == nullptr) {
    return absl::InvalidArgumentError("aligner with a hidden layer needs scratch space");
  }
  const StreamHandle s = gemm.stream();
  // h = (c + b₂) + z A
  if (absl::Status st = BroadcastRow(h, f.c_b2, rows, f.out_dim, s); !st.ok()) return st;
  if (absl::Status st = gemm.MatMulF32(z, f.a, h, rows, f.out_dim, f.code_dim, 1.0f); !st.ok()) {
    return st;
  }
  if (f.hidden_dim == 0) return absl::OkStatus();
  // u = silu(z W₁ + b₁); h += u W₂
  if (absl::Status st = gemm.MatMulF32(z, f.w1, hidden, rows, f.hidden_dim, f.code_dim, 0.0f);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = BiasActivation(hidden, f.b1, rows, f.hidden_dim, Activation::kSilu, s);
      !st.ok()) {
    return st;
  }
  return gemm.MatMulF32(hidden, f.w2, h, rows, f.out_dim, f.hidden_dim, 1.0f);
}

}  // namespace scd::cuda
