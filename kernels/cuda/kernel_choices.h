// The kernels a CUDA backend runs where it has a choice (KernelChoices, synthetic_backend.h):
// read from BackendOptions' names, checked against a model's shape, and described with kAuto
// resolved as the launchers resolve it. CUDA-free header.
#ifndef SCD_KERNELS_CUDA_KERNEL_CHOICES_H_
#define SCD_KERNELS_CUDA_KERNEL_CHOICES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/config.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/synthetic_backend.h"

namespace scd::cuda {

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

#endif  // SCD_KERNELS_CUDA_KERNEL_CHOICES_H_
