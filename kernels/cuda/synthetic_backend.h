// A CUDA backend whose weights are drawn on the device (DeviceWeights::Random) instead of
// uploaded from a host Model, so benchmarks can run Mistral-7B / Llama-3-8B shapes without a
// 30 GB F32 host copy. Its model() has the config but empty host weights. Also the hooks that
// let kernels outside the backend write a sequence's cache or run a step's attention.
// CUDA-free header.
#ifndef SCD_KERNELS_CUDA_SYNTHETIC_BACKEND_H_
#define SCD_KERNELS_CUDA_SYNTHETIC_BACKEND_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {

absl::StatusOr<std::unique_ptr<Backend>> CreateSyntheticCudaBackend(const ModelConfig& config,
                                                                    uint64_t seed,
                                                                    float init_std = 0.02f);

// True when `backend` itself is a CUDA backend (a wrapper that forwards to one, such as
// sekv::KvCaptureBackend, is not: its sequences and steps are not the device's).
bool IsCudaBackend(const Backend& backend);

// The device a CUDA backend runs on, for threads other than the backend's that make CUDA
// calls for it (cuda::SetDevice first). Fails when `backend` is not a CUDA backend.
absl::StatusOr<int> CudaBackendDevice(const Backend& backend);

// A CUDA backend sequence's device KV cache (layout in ops.h), for writers outside the
// backend such as the SCD GPU rebuild (scd_rebuilder.h): they store positions
// [length, length + T) on their own stream, wait for it, then CudaCommitPositions. Fails when
// `backend` is not a CUDA backend or `seq` is not its sequence.
absl::StatusOr<SequenceCache> CudaSequenceCache(Backend& backend, Sequence& seq);

// Marks `tokens` positions after seq.length() as filled (their K/V already stored).
absl::Status CudaCommitPositions(Backend& backend, Sequence& seq, int tokens);

// CUDA graphs for the backend's decode steps (Decode, DecodeSample): the step's work through
// the logits is recorded once per shape (batch size, the length bucket of
// split_plan::DecodeLengthBucket, the metadata layout and the buffers it uses) and replayed
// with one launch, instead of a few hundred kernel launches per step. Sampling and the copy
// back run after it as usual. Graphed and eager steps run the same kernels on the same
// plan, so their results are identical. A capture CUDA refuses turns graphs off for good
// (the step still runs, eagerly); Backend::decode_graph_stats() says so.
struct DecodeGraphOptions {
  bool enabled = true;
  int max_batch = 64;   // larger batches run eagerly
  int max_graphs = 64;  // cached graphs; the least recently used is dropped beyond this
};

// Sets `backend`'s decode-graph options (dropping its cached graphs). Fails when `backend` is
// not CUDA or the options are out of range. Backend::decode_graph_stats() reports the use.
absl::Status SetDecodeGraphs(Backend& backend, const DecodeGraphOptions& options);

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

// Where a CUDA backend's device time goes (OpClock, op_profile.h): with profiling on, every
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

// Turns profiling on or off (dropping what was gathered and not taken). Fails when `backend`
// is not CUDA.
absl::Status SetOpProfiling(Backend& backend, bool on);

// What profiling gathered since it was turned on or last taken (waiting for the stream), and
// starts again from zero. Fails when `backend` is not CUDA.
absl::StatusOr<OpProfile> TakeOpProfile(Backend& backend);

// The clock behind SetOpProfiling (op_profile.h), for code that queues work on the backend's
// stream within its pass (GpuSekv's row attention) and marks its own operations there
// (OpClock::Mark): taken once, it costs one branch a mark while profiling is off. Fails when
// `backend` is not CUDA.
class OpClock;
absl::StatusOr<OpClock*> OpClockOf(Backend& backend);

// Bytes of device weights one decode step streams (for a backend made by either factory);
// 0 when `backend` is not a CUDA backend.
size_t CudaDecodeBytesStreamed(const Backend& backend);

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_SYNTHETIC_BACKEND_H_
