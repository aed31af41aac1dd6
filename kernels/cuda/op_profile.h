// OpClock: the CUDA backend's per-operation timing (SetOpProfiling,
// common/runtime/cuda/op_profiling.h), with the classes it times (OpClass) and what it gathers
// (OpProfile). A forward pass records an event when it starts (Begin) and one after each
// operation (Mark); the time between two consecutive events belongs to the operation the second
// one follows, so an operation that is not followed by a Mark would be counted in the next
// one's class: every operation of a pass, from its Begin to its last Mark, is marked. Nothing
// is recorded while the clock is off, and a Mark costs one branch then. The events come from a
// pool that grows as needed; they are read once the stream has passed them (Take, or a Begin
// when many are waiting), so timing never waits on the device in the middle of a pass.
// CUDA-free header.
#ifndef SCD_KERNELS_CUDA_OP_PROFILE_H_
#define SCD_KERNELS_CUDA_OP_PROFILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/device_memory.h"

namespace scd::cuda {

// Where a CUDA backend's device time goes (OpClock, below): with profiling on, every
// operation of a forward pass, from the embedding through the logits, is followed by a CUDA
// event on the backend's stream, and the time between consecutive events goes to the class of
// the operation just finished. That is time on the device's clock, so where the device waited
// for the host to queue an operation (launches, host work such as GpuSekv's host zoom), the
// wait counts in that operation's class. What runs after the logits (sampling, copies back,
// surprisal) is not counted. Decode steps run eagerly while it is on (a graph replays as one
// launch); the events cost the stream a little time, so a profiled pass is slower than an
// unprofiled one.
enum class OpClass : int {
  kEmbed,        // token embedding
  kNorm,         // the layers' RMSNorms (with the BF16 copy for the next GEMM)
  kQkv,          // the fused Q/K/V projection (and its bias)
  kRopeKv,       // RoPE on Q and K, and K/V into the cache
  kAttention,    // prefill or decode attention, or a row's external attention (GpuSekv)
  kElementwise,  // the attention output to BF16, SwiGLU, and the hooks' copies
  kOutProj,      // the attention output projection (and the residual)
  kGateUp,       // the fused gate/up projection
  kDown,         // the down projection (and the residual)
  kLogits,       // the final RMSNorm and the LM head
  // The parts of a GpuSekv row's attention, which GpuSekv marks itself (OpClockOf); the rest of
  // it (the window's new row, the first step's pins, the expanded rows' softmax and merge)
  // stays in kAttention.
  kSekvGate,      // the resident log-sum-exp and the routing gate
  kSekvZoom,      // the zoom-in (SekvZoom; with the host zoom, the host's selection) and counts
  kSekvResident,  // the resident part of the softmax
};
inline constexpr int kOpClasses = 13;
inline constexpr const char* kOpClassNames[kOpClasses] = {
    "embed",   "norm", "qkv",    "rope_kv",   "attention", "elementwise",  "o_proj",
    "gate_up", "down", "logits", "sekv_gate", "sekv_zoom", "sekv_resident"};

struct OpProfile {
  double ms[kOpClasses] = {};    // device time of each class, summed over the passes
  int64_t ops[kOpClasses] = {};  // operations timed in each class
  int64_t passes = 0;            // forward passes (a prefill, a decode step)
  double pass_ms = 0;            // Σ over the passes of the first event to the last
};

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
