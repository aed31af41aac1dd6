// A CUDA backend whose weights are drawn on the device (DeviceWeights::Random) instead of
// uploaded from a host Model, so benchmarks can run Mistral-7B / Llama-3-8B shapes without a
// 30 GB F32 host copy. Its model() has the config but empty host weights. CUDA-free header.
#ifndef SCD_COMMON_RUNTIME_CUDA_SYNTHETIC_BACKEND_H_
#define SCD_COMMON_RUNTIME_CUDA_SYNTHETIC_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"

namespace scd::cuda {

absl::StatusOr<std::unique_ptr<Backend>> CreateSyntheticCudaBackend(const ModelConfig& config,
                                                                    uint64_t seed,
                                                                    float init_std = 0.02f);

}  // namespace scd::cuda

#endif  // SCD_COMMON_RUNTIME_CUDA_SYNTHETIC_BACKEND_H_
