// A CUDA backend's op profiling: where its device time goes, by class of operation (OpClass,
// OpProfile and the clock itself are kernels/cuda/op_profile.h's). CUDA-free header.
#ifndef SCD_COMMON_RUNTIME_CUDA_OP_PROFILING_H_
#define SCD_COMMON_RUNTIME_CUDA_OP_PROFILING_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/op_profile.h"

namespace scd::cuda {

// Turns profiling on or off (dropping what was gathered and not taken). Fails when `backend`
// is not CUDA.
absl::Status SetOpProfiling(Backend& backend, bool on);

// What profiling gathered since it was turned on or last taken (waiting for the stream), and
// starts again from zero. Fails when `backend` is not CUDA.
absl::StatusOr<OpProfile> TakeOpProfile(Backend& backend);

// The clock behind SetOpProfiling (kernels/cuda/op_profile.h), for code that queues work on the
// backend's stream within its pass (GpuSekv's row attention) and marks its own operations there
// (OpClock::Mark): taken once, it costs one branch a mark while profiling is off. Fails when
// `backend` is not CUDA.
absl::StatusOr<OpClock*> OpClockOf(Backend& backend);

}  // namespace scd::cuda

#endif  // SCD_COMMON_RUNTIME_CUDA_OP_PROFILING_H_
