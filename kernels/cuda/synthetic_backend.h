// A CUDA backend whose weights are drawn on the device (DeviceWeights::Random) instead of
// uploaded from a host Model, so benchmarks can run Mistral-7B / Llama-3-8B shapes without a
// 30 GB F32 host copy. Its model() has the config but empty host weights. Also the hooks that
// let kernels outside the backend write a sequence's cache. CUDA-free header.
#ifndef SCD_KERNELS_CUDA_SYNTHETIC_BACKEND_H_
#define SCD_KERNELS_CUDA_SYNTHETIC_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {

absl::StatusOr<std::unique_ptr<Backend>> CreateSyntheticCudaBackend(const ModelConfig& config,
                                                                    uint64_t seed,
                                                                    float init_std = 0.02f);

// A CUDA backend sequence's device KV cache (layout in ops.h), for writers outside the
// backend such as the SCD GPU rebuild (scd_rebuilder.h): they store positions
// [length, length + T) on their own stream, wait for it, then CudaCommitPositions. Fails when
// `backend` is not a CUDA backend or `seq` is not its sequence.
absl::StatusOr<SequenceCache> CudaSequenceCache(Backend& backend, Sequence& seq);

// Marks `tokens` positions after seq.length() as filled (their K/V already stored).
absl::Status CudaCommitPositions(Backend& backend, Sequence& seq, int tokens);

// Bytes of device weights one decode step streams (for a backend made by either factory);
// 0 when `backend` is not a CUDA backend.
size_t CudaDecodeBytesStreamed(const Backend& backend);

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_SYNTHETIC_BACKEND_H_
