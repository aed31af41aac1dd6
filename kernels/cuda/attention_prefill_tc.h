// Internal entry points of the tensor-core prefill attention (attention_prefill_tc.cu and
// attention_prefill_mma.cu); callers
// go through scd::cuda::PrefillAttention (ops.h), which validates the arguments. CUDA-free.
#ifndef SCD_KERNELS_CUDA_ATTENTION_PREFILL_TC_H_
#define SCD_KERNELS_CUDA_ATTENTION_PREFILL_TC_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda::internal {

// launch(std::integral_constant<int, HD>{}) for the head sizes the tensor-core kernels are
// built for, 64 and 128 (launch_checks::TensorCoreHeadDim); an error for any other.
template <typename Launch>
absl::Status WithTensorCoreHeadDim(int head_dim, const char* kernel, Launch&& launch) {
  const std::string unsupported = absl::StrCat(kernel, " supports head_dim 64 and 128");
  return launch_checks::WithIntConstant<64, 128>(head_dim, unsupported.c_str(), launch);
}

// head_dim 64 or 128 (launch_checks::TensorCoreHeadDim).
absl::Status PrefillAttentionTensorCore(const float* q, int64_t q_stride, const Bf16* k,
                                        const Bf16* v, float* out, int64_t out_stride, int tokens,
                                        int start, int num_heads, int num_kv_heads, int head_dim,
                                        int window, StreamHandle stream);

// The same through mma.sync with register-resident fragments (attention_prefill_mma.cu).
absl::Status PrefillAttentionMma(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v,
                                 float* out, int64_t out_stride, int tokens, int start,
                                 int num_heads, int num_kv_heads, int head_dim, int window,
                                 StreamHandle stream);

}  // namespace scd::cuda::internal

#endif  // SCD_KERNELS_CUDA_ATTENTION_PREFILL_TC_H_
