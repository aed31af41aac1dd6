// CpuBackend: the reference implementation of Backend on the host, built from kernels/cpu and
// OpenBLAS. It is the specification the CUDA backend is parity-tested against and the path CI
// runs. Not thread-safe: one caller at a time per backend (the decode loop owns it).
#ifndef SCD_COMMON_RUNTIME_CPU_BACKEND_H_
#define SCD_COMMON_RUNTIME_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"

namespace scd {

// With kInt8 every layer matrix and the output matrix are converted to int8 here, once, and
// the F32 pages they came from are released (WeightBuffer::ReleasePages) so that a mapped
// checkpoint's F32 copy stops counting in the process's memory.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model,
                                                          WeightDtype dtype = WeightDtype::kF32);

// Bytes of weights the backend computes from: the matrices in the form it holds them, plus the
// F32 norms and embedding table it reads from the model. 0 for a backend of another kind.
size_t CpuBackendWeightBytes(const Backend& backend);

// Bytes a decode step reads (CpuWeights::streamed): the weights less an embedding table that is
// read a row per token. 0 for a backend of another kind.
size_t CpuBackendStreamedBytes(const Backend& backend);

// True when `backend` was made by CreateCpuBackend.
bool IsCpuBackend(const Backend& backend);

}  // namespace scd

#endif  // SCD_COMMON_RUNTIME_CPU_BACKEND_H_
