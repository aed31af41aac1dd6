// OpClock: the CUDA backend's per-operation timing (SetOpProfiling, synthetic_backend.h). A
// forward pass records an event when it starts (Begin) and one after each operation (Mark);
// the time between two consecutive events belongs to the operation the second one follows,
// so an operation that is not followed by a Mark would be counted in the next one's class:
// every operation of a pass, from its Begin to its last Mark, is marked. Nothing is recorded
// while the clock is off, and a Mark costs one branch then. The events come from a pool that
// grows as needed; they are read once the stream has passed them (Take, or a Begin when many
// are waiting), so timing never waits on the device in the middle of a pass.
// CUDA-free header.
#ifndef SCD_KERNELS_CUDA_OP_PROFILE_H_
#define SCD_KERNELS_CUDA_OP_PROFILE_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/synthetic_backend.h"

namespace scd::cuda {

class OpClock {
 public:
  bool on() const { return on_; }
  // Turns the clock on or off; what it gathered and was not taken is dropped.
  void Enable(bool on);
  // A forward pass starts on `stream` (nothing when off).
  absl::Status Begin(StreamHandle stream);
  // An operation of class `c` was queued on `stream` and returned `op`: `op` when it failed or
  // the clock is off, else the event's status.
  absl::Status Mark(OpClass c, absl::Status op, StreamHandle stream);
  // What was gathered since Enable or the last Take, after the stream passed it.
  absl::StatusOr<OpProfile> Take();

 private:
  // Events recorded before a Begin that finds this many waiting are read first.
  static constexpr size_t kFoldAt = 4096;

  absl::Status Record(int tag, StreamHandle stream);
  // Waits for the last event recorded and adds the pending passes into folded_.
  absl::Status Fold();

  bool on_ = false;
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<int> tags_;  // each recorded event's class, or kPassStart
  size_t used_ = 0;
  OpProfile folded_;
  static constexpr int kPassStart = -1;
};

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_OP_PROFILE_H_
