// Backend: where a model's forward pass runs (ggml-backend / NIXL-engine style). The CPU
// backend (kernels/cpu + OpenBLAS) is the reference; the CUDA backend (kernels/cuda) must
// match it op by op. Public headers never include CUDA headers.
//
// A Sequence owns one request's KV cache on the backend: post-RoPE keys and values per layer,
// [capacity, kv_dim] each. Prefill appends tokens; AppendKv appends positions whose pre-RoPE
// K and V were computed elsewhere (SCD's consumer side), applying this model's RoPE at their
// positions; Decode appends one token per sequence and returns next-token logits.
#ifndef SCD_COMMON_RUNTIME_BACKEND_H_
#define SCD_COMMON_RUNTIME_BACKEND_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/weights.h"
#include "common/runtime/sampler.h"

namespace scd {

enum class BackendKind { kCpu, kCuda };

struct PrefillOptions {
  bool all_logits = false;    // logits for every prompt position, else the last only
  bool layer_states = false;  // per-layer H_in, pre-RoPE K and V (the SCD/SEKV hooks)
  bool surprisal = false;     // -log p(x_t | x_<t) for every prompt position
  bool residual = false;      // per-layer residual stream entering the layer (recompute mode)
};

// Per-layer hook outputs for the tokens of one Prefill call, row-major.
struct LayerStates {
  std::vector<float> h_in;        // [T, d] RMS-normalised input to attention
  std::vector<float> k_pre_rope;  // [T, kv_dim] keys before RoPE (biases included)
  std::vector<float> v;           // [T, kv_dim]
  std::vector<float> residual;    // [T, d] un-normalised input to the layer (residual option)
};

struct PrefillResult {
  int num_tokens = 0;
  std::vector<float> logits;        // [T, vocab] with all_logits, else [vocab]
  std::vector<LayerStates> layers;  // [num_layers] with layer_states
  // [T] with surprisal. Entry t is -log softmax(logits[t-1])[x_t]. The first token of the
  // call has no prediction inside the call: 0 when the sequence was empty (BOS), otherwise
  // computed from the logits the previous Prefill/Decode of this sequence produced.
  std::vector<float> surprisal;
};

// Pre-RoPE keys and values for `num_tokens` consecutive positions, per layer.
struct ExternalKv {
  int num_tokens = 0;
  std::vector<std::vector<float>> k_pre_rope;  // [num_layers][T * kv_dim]
  std::vector<std::vector<float>> v;           // [num_layers][T * kv_dim]
};

class Sequence {
 public:
  virtual ~Sequence() = default;
  virtual int length() const = 0;    // positions filled
  virtual int capacity() const = 0;  // positions allocated
};

// How a backend has run its decode steps: recorded once and replayed (CUDA graphs, see
// common/runtime/cuda/decode_graph_cache.h), or launched op by op. All zero for backends without
// graphs. Counters run from the backend's creation.
struct DecodeGraphStats {
  int64_t captures = 0;     // graphs recorded
  int64_t replays = 0;      // steps run by replaying a recorded graph
  int64_t eager_steps = 0;  // steps launched op by op (graphs off, large batch, fallback)
  int64_t evictions = 0;    // recorded graphs dropped for newer shapes
  int64_t capture_failures = 0;
  std::string last_failure;  // why the last capture failed (graphs are off since)
  size_t last_nodes = 0;     // operations in the last graph recorded
  int cached = 0;            // graphs held now
  size_t device_bytes = 0;   // device memory the graphs held now take (cuda::Graph::device_bytes)
  bool active = false;       // graphs on and not turned off by a failure
};

// The attention of one decode-step row computed outside the backend, by the caller that holds
// the row's context itself (the SEKV path: sekv::SekvCache on the host, sekv::GpuSekv on the
// device). Pointers are in the backend's memory: host F32 for the CPU backend, device F32 for
// the CUDA backend, whose stream `stream` is (null on the CPU).
class RowAttention {
 public:
  virtual ~RowAttention() = default;
  // Called once per layer, in layer order: q [num_heads, head_dim] and k [kv_dim] after RoPE,
  // v [kv_dim], of the row's token. Writes out [num_heads, head_dim] (on the CUDA backend by
  // work on `stream`; it may wait on the stream).
  virtual absl::Status Attend(int layer, const float* q, const float* k, const float* v, float* out,
                              void* stream) = 0;
};

// Rows of a decode step whose attention is the caller's (Backend::DecodeMixed): row i runs
// tokens[i] at positions[i] through attention[i].
struct ExternalRows {
  absl::Span<const int32_t> tokens;
  absl::Span<const int> positions;
  absl::Span<RowAttention* const> attention;
  size_t size() const { return tokens.size(); }
};

// The memory of the device a backend runs on, as its driver reports it now.
struct DeviceMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// The largest calls a backend is to get, for Backend::ReserveWorkspace.
struct WorkspaceShape {
  int prefill_tokens = 0;             // tokens of one Prefill call
  bool prefill_surprisal = false;     // ... asking for PrefillOptions::surprisal
  bool prefill_layer_states = false;  // ... and for layer_states
  int decode_rows = 0;                // rows of one decode step: sequences and external rows
  int decode_length = 0;              // positions of the longest sequence a step reads
  int append_tokens = 0;              // positions of one AppendKv call
};

// The scratch memory a backend holds beside its weights and sequences.
struct WorkspaceBytes {
  size_t device = 0;       // activations, logits, attention and sampling workspaces, staging
  size_t pinned_host = 0;  // page-locked host buffers (step metadata, results, uploads)
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  // What it runs on, for logs: "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)", "host CPU (16
  // hardware threads)".
  virtual std::string device_description() const = 0;
  // The kernels it runs where it has a choice, for logs ("prefill attention wmma (auto), decode
  // attention vectorized (auto), projections of up to 8 rows as a weight stream, larger ones
  // cuBLAS"); empty where it has none.
  virtual std::string kernel_description() const { return ""; }
  virtual const Model& model() const = 0;

  // A new, empty sequence that holds up to `capacity` positions
  // (at most max_position_embeddings).
  virtual absl::StatusOr<std::unique_ptr<Sequence>> NewSequence(int capacity) = 0;

  // The bytes NewSequence(capacity) takes from the backend's memory: what the decode engine
  // reserves for a request's KV cache (DecodeEngineOptions::kv_budget_bytes).
  virtual size_t SequenceBytes(int capacity) const = 0;

  // The memory of the device the backend runs on, now. UNIMPLEMENTED for a backend whose
  // memory is the host's (the CPU backend).
  virtual absl::StatusOr<DeviceMemory> DeviceMemoryNow() const {
    return absl::UnimplementedError(std::string(name()) + " backend has no device memory");
  }

  // Grows the backend's scratch memory now to what calls no larger than `shape` take, so that
  // a reading of the device's memory after it (DeviceMemoryNow) counts it and such calls
  // allocate nothing more. A larger call still runs, growing the scratch then.
  // RESOURCE_EXHAUSTED when the device cannot hold it. A backend that allocates its scratch
  // per call, on the host (the CPU backend), reserves nothing.
  virtual absl::Status ReserveWorkspace(const WorkspaceShape& shape) {
    (void)shape;
    return absl::OkStatus();
  }
  // The scratch memory the backend holds now.
  virtual WorkspaceBytes Workspace() const { return {}; }

  // Runs `tokens` through the model at positions [seq.length(), seq.length() + T) and appends
  // their K/V. Fails without changing `seq` when the tokens do not fit or are out of vocab.
  virtual absl::Status Prefill(Sequence& seq, absl::Span<const int32_t> tokens,
                               const PrefillOptions& options, PrefillResult* result) = 0;

  // Appends positions whose pre-RoPE K and V come from outside, applying RoPE here.
  virtual absl::Status AppendKv(Sequence& seq, const ExternalKv& kv) = 0;

  // Copies the cache's K and V of positions [start, start + rows) into `out` in F32, K with
  // RoPE applied (the shadow oracle's comparison of a rebuilt cache with the consumer's own:
  // RoPE turns each head's pairs by the position's angles, so a difference at one position
  // has the same norm before and after it). OUT_OF_RANGE past seq.length(); backends without
  // it return UNIMPLEMENTED.
  virtual absl::Status ReadKv(const Sequence& seq, int start, int rows, ExternalKv* out) const {
    (void)seq, (void)start, (void)rows, (void)out;
    return absl::UnimplementedError(std::string(name()) + " backend has no ReadKv");
  }

  // One decode step for a batch: appends tokens[b] to seqs[b] and writes next-token logits
  // into `logits` as [B, vocab].
  virtual absl::Status Decode(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                              std::vector<float>* logits) = 0;

  // Decode, then the next token of row b picked with draws[b] (SampleWithDraw): token ids
  // instead of logits. This default samples the host logits; the CUDA backend samples on the
  // device and copies back only the ids.
  virtual absl::Status DecodeSample(absl::Span<Sequence* const> seqs,
                                    absl::Span<const int32_t> tokens,
                                    absl::Span<const SampleDraw> draws, std::vector<int32_t>* next);

  // DecodeSample's step for `seqs` and, in the same pass over the weights, `external`'s rows
  // (their attention the caller's): the GEMMs run over both kinds of rows at once, so each
  // weight matrix is read once per step, not once per kind. Row i of `external` gets its
  // next-token logits [vocab] in (*external_logits)[i]. Either part may be empty. The inputs of
  // both parts are checked before anything runs; a failing RowAttention fails the whole step
  // with no sequence advanced. Backends without it return UNIMPLEMENTED (callers then run the
  // two parts apart).
  virtual absl::Status DecodeMixed(absl::Span<Sequence* const> seqs,
                                   absl::Span<const int32_t> tokens,
                                   absl::Span<const SampleDraw> draws, std::vector<int32_t>* next,
                                   const ExternalRows& external,
                                   std::vector<std::vector<float>>* external_logits) {
    (void)seqs, (void)tokens, (void)draws, (void)next, (void)external, (void)external_logits;
    return absl::UnimplementedError(std::string(name()) + " backend has no DecodeMixed");
  }

  virtual DecodeGraphStats decode_graph_stats() const { return {}; }

  // Selective recompute (DroidSpeak-style): re-runs layers [first_layer, end_layer) for the
  // positions [start, start + rows) already in `seq`, starting from `residual_in` [rows, d],
  // the residual stream entering first_layer, and overwrites those layers' K/V there.
  // Attention reads the cache for earlier positions. Backends without it return UNIMPLEMENTED.
  virtual absl::Status RecomputeLayers(Sequence& seq, int start, int first_layer, int end_layer,
                                       absl::Span<const float> residual_in) {
    (void)seq, (void)start, (void)first_layer, (void)end_layer, (void)residual_in;
    return absl::UnimplementedError(std::string(name()) + " backend has no RecomputeLayers");
  }
};

// Row b of `logits` [draws.size(), vocab] (host memory) sampled with draws[b]
// (SampleWithDraw) into (*next)[b]: Backend::DecodeSample's default.
void SampleHostRows(const float* logits, int vocab, absl::Span<const SampleDraw> draws,
                    std::vector<int32_t>* next);

// True when this build and this machine can run `kind`.
bool BackendAvailable(BackendKind kind);

// The CUDA backend's kernels where it has a choice, by name (common/runtime/cuda/kernel_choices.h,
// cuda::KernelChoices): entry i of each list is value i of cuda::AttentionImpl and
// cuda::DecodeImpl. "auto" is the backend's own choice.
inline constexpr std::array<std::string_view, 4> kCudaPrefillAttentionNames = {"auto", "generic",
                                                                               "wmma", "mma"};
inline constexpr std::array<std::string_view, 3> kCudaDecodeAttentionNames = {"auto", "generic",
                                                                              "vectorized"};
inline constexpr int kCudaSmallBatchRowsLimit = 8;  // cuda::kSmallBatchMaxRows

struct CudaKernelOptions {
  std::string prefill_attention = "auto";  // kCudaPrefillAttentionNames
  // The decode step's attention, and the GPU SEKV path's (kCudaDecodeAttentionNames).
  std::string decode_attention = "auto";
  // Projections of at most this many rows (decode batches) as a weight stream (gemv.cu)
  // instead of cuBLAS; 0: cuBLAS always. 0 to kCudaSmallBatchRowsLimit.
  int small_batch_max_rows = kCudaSmallBatchRowsLimit;
};

// How the CPU backend holds the weight matrices: as loaded (F32), or as int8 in blocks of 32
// with a scale each (kernels/cpu/q8_linear.h), converted once when the backend is created.
// Norms and the embedding table stay F32. The CUDA backend takes F32 only.
enum class WeightDtype { kF32, kInt8 };

absl::StatusOr<WeightDtype> ParseWeightDtype(std::string_view name);  // "f32" | "int8"
std::string_view WeightDtypeName(WeightDtype dtype);

// Settings only some backends read; the others ignore them.
struct BackendOptions {
  WeightDtype weights_dtype = WeightDtype::kF32;  // config key weights.dtype
  // CUDA: decode steps of batches up to cuda_graph_max_batch recorded once per shape as CUDA
  // graphs and replayed (common/runtime/cuda/decode_graph_cache.h, DecodeGraphOptions).
  bool cuda_graphs = true;
  int cuda_graph_max_batch = 64;
  CudaKernelOptions cuda_kernels;
};

// Creates a backend of `kind` for `model`. kCuda fails with UNAVAILABLE when the build has no
// CUDA support or no device is present.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind,
                                                       std::shared_ptr<const Model> model,
                                                       const BackendOptions& options = {});

absl::StatusOr<BackendKind> ParseBackendKind(std::string_view name);

}  // namespace scd

#endif  // SCD_COMMON_RUNTIME_BACKEND_H_
