// CpuBackend: the reference implementation of Backend on the host, built from kernels/cpu and
// OpenBLAS. It is the specification the CUDA backend is parity-tested against and the path CI
// runs. Not thread-safe: one caller at a time per backend (the decode loop owns it).
#ifndef SCD_COMMON_RUNTIME_CPU_BACKEND_H_
#define SCD_COMMON_RUNTIME_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"

namespace scd {

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model);

// True when `backend` was made by CreateCpuBackend.
bool IsCpuBackend(const Backend& backend);

}  // namespace scd

#endif  // SCD_COMMON_RUNTIME_CPU_BACKEND_H_
