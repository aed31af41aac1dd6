// Internal entry points of the tensor-core prefill attention (attention_prefill_tc.cu and
// attention_prefill_mma.cu); callers
// go through scd::cuda::PrefillAttention (ops.h), which validates the arguments. CUDA-free.
#ifndef SCD_KERNELS_CUDA_ATTENTION_PREFILL_TC_H_
#define SCD_KERNELS_CUDA_ATTENTION_PREFILL_TC_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda::internal {

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
