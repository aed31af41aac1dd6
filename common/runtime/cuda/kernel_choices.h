// The kernels a CUDA backend runs where it has a choice (KernelChoices): set and read on a
// backend, read from BackendOptions' names, checked against a model's shape, and described with
// kAuto resolved as the launchers resolve it. CUDA-free header.
#ifndef SCD_COMMON_RUNTIME_CUDA_KERNEL_CHOICES_H_
#define SCD_COMMON_RUNTIME_CUDA_KERNEL_CHOICES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/config.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {

// The kernels a CUDA backend runs where it has a choice. The defaults are kAuto's; the
// benchmark sets others to time them side by side in one run, and an operator can pin one
// (BackendOptions' cuda_* kernel keys, by the names of kCudaPrefillAttentionNames and
// kCudaDecodeAttentionNames, which follow these enums' order) until a device run has settled
// kAuto's choice.
struct KernelChoices {
  AttentionImpl prefill_attention = AttentionImpl::kAuto;  // Prefill's attention
  // The decode step's attention, and GpuSekv's split attention over the same backend.
  DecodeImpl decode_attention = DecodeImpl::kAuto;
  // Projections of m <= this many rows run LinearSmallBatch (gemv.cu) where it can; larger m,
  // and every m when 0, run cuBLAS. At most kSmallBatchMaxRows.
  int small_batch_max_rows = kSmallBatchMaxRows;
};

// Sets `backend`'s kernel choices and drops its cached decode graphs (they hold the old
// kernels). Fails, changing nothing, when `backend` is not CUDA or a kernel asked for by name
// cannot run its model's shape (the tensor-core prefill kernels need head_dim 64 or 128; the
// vectorized decode kernel a GQA group of 1, 2, 4 or 8 and head_dim 8 * 2^i up to 256).
absl::Status SetKernelChoices(Backend& backend, const KernelChoices& choices);

// `backend`'s kernel choices; fails when it is not CUDA.
absl::StatusOr<KernelChoices> KernelChoicesOf(const Backend& backend);

// The choices `options` names (kCudaPrefillAttentionNames, kCudaDecodeAttentionNames); an
// unknown name is INVALID_ARGUMENT, listing the known ones.
absl::StatusOr<KernelChoices> KernelChoicesFrom(const CudaKernelOptions& options);

// Fails, saying why, where an attention kernel `choices` pins cannot run `config`'s shape (the
// GEMMs check small_batch_max_rows themselves).
absl::Status CheckKernelChoices(const ModelConfig& config, const KernelChoices& choices);

// What runs, kAuto resolved: "prefill attention wmma (auto), decode attention vectorized
// (auto), projections of up to 8 rows as a weight stream, larger ones cuBLAS". The cache's K/V
// are taken as 16-byte aligned, as the backend's are.
std::string DescribeKernelChoices(const ModelConfig& config, const KernelChoices& choices);

}  // namespace scd::cuda

#endif  // SCD_COMMON_RUNTIME_CUDA_KERNEL_CHOICES_H_
