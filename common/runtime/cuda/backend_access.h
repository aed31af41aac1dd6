// The hooks that let code outside the CUDA backend (cuda_backend.cc) reach it: whether a
// backend is one, the device it runs on, a sequence's device KV cache for writers such as the
// SCD GPU rebuild, and the weight bytes a decode step streams. CUDA-free header.
#ifndef SCD_COMMON_RUNTIME_CUDA_BACKEND_ACCESS_H_
#define SCD_COMMON_RUNTIME_CUDA_BACKEND_ACCESS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {

// True when `backend` itself is a CUDA backend (a wrapper that forwards to one, such as
// sekv::KvCaptureBackend, is not: its sequences and steps are not the device's).
bool IsCudaBackend(const Backend& backend);

// The device a CUDA backend runs on, for threads other than the backend's that make CUDA
// calls for it (cuda::SetDevice first). Fails when `backend` is not a CUDA backend.
absl::StatusOr<int> CudaBackendDevice(const Backend& backend);

// A CUDA backend sequence's device KV cache (layout in kernels/cuda/ops.h), for writers outside the
// backend such as the SCD GPU rebuild (kernels/cuda/scd_rebuilder.h): they store positions
// [length, length + T) on their own stream, wait for it, then CudaCommitPositions. Fails when
// `backend` is not a CUDA backend or `seq` is not its sequence.
absl::StatusOr<SequenceCache> CudaSequenceCache(Backend& backend, Sequence& seq);

// Marks `tokens` positions after seq.length() as filled (their K/V already stored).
absl::Status CudaCommitPositions(Backend& backend, Sequence& seq, int tokens);

// Bytes of device weights one decode step streams (for a backend made by either factory);
// 0 when `backend` is not a CUDA backend.
size_t CudaDecodeBytesStreamed(const Backend& backend);

}  // namespace scd::cuda

#endif  // SCD_COMMON_RUNTIME_CUDA_BACKEND_ACCESS_H_
