// CUDA kernels of the forward pass: one host-callable launcher per kernels/cpu op (the CPU
// twin is named in each comment and tests/gpu/parity compares the two). CUDA-free header: device
// memory is passed as plain pointers, the stream as an opaque StreamHandle, and every launcher
// returns the launch status (it does not synchronise). Layouts are row-major, as in kernels/cpu.
//
// Numerics: activations are F32; weights and the KV cache are BF16 (see bf16.h); every
// reduction (norms, dot products, softmax sums) accumulates in F32. Ops that take F32 inputs
// and write F32 match their CPU twin to ~1e-5 relative; ops that read BF16 match the CPU twin
// run on the BF16-rounded inputs to the same tolerance, except the tensor-core attention,
// which also rounds Q and the softmax probabilities to BF16 (~1e-2).
//
// KV cache layout (the SCD decoder and SEKV kernels write into it directly): one allocation
// per sequence and per K/V, [num_layers][capacity][kv_dim] BF16, K after RoPE. Position p of
// layer l lives at base + l * layer_stride + p * kv_dim; KV head g occupies columns
// [g * head_dim, (g + 1) * head_dim).
#ifndef SCD_KERNELS_CUDA_OPS_H_
#define SCD_KERNELS_CUDA_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_memory.h"

namespace scd::cuda {

// ---- conversions, elementwise (elementwise.cu) ----

absl::Status F32ToBf16(const float* x, Bf16* y, int64_t count, StreamHandle stream);
absl::Status Bf16ToF32(const Bf16* x, float* y, int64_t count, StreamHandle stream);

// out[t, :] = table[ids[t], :] widened to F32. Twin: cpu::Embed (on the BF16-rounded table).
// ids must be valid (the backend checks them on the host).
absl::Status Embed(const Bf16* table, const int32_t* ids, float* out, int tokens, int dim,
                   StreamHandle stream);

// y[i] += x[i]: the residual add (the backend fuses it into the GEMM epilogue with beta = 1;
// this op is the standalone form). Twin: the loop in CpuBackend::Forward.
absl::Status AddInPlace(float* y, const float* x, int64_t count, StreamHandle stream);

// y[r, c] += bias[c] for rows of `cols` columns at `row_stride` floats (Qwen2 q/k/v biases).
// Twin: the bias branch of cpu::Linear.
absl::Status AddBias(float* y, const float* bias, int rows, int cols, int64_t row_stride,
                     StreamHandle stream);

// out[r, i] = silu(gate[r, i]) * up[r, i] for i < ffn. gate and up rows are `in_stride`
// floats apart (2 * ffn for the fused gate|up GEMM output); out rows are `ffn` apart. Either
// output may be null. Twin: cpu::SwiGlu.
absl::Status SwiGlu(const float* gate, const float* up, int64_t in_stride, float* out,
                    Bf16* out_bf16, int rows, int ffn, StreamHandle stream);

// dst[r][0, cols) = src[r * src_stride, +cols) for device pointers dst[r] (a device array):
// scatters a batch's logits rows into each sequence's own buffer in one launch.
absl::Status ScatterRows(const float* src, int64_t src_stride, float* const* dst, int rows,
                         int cols, StreamHandle stream);

// Deterministic pseudo-random fill for benchmark weights: x[i] = uniform(-a, a) with
// a = stddev * sqrt(3) (so the standard deviation is `stddev`), from a hash of (seed, i).
absl::Status FillRandomBf16(Bf16* x, int64_t count, uint64_t seed, float stddev,
                            StreamHandle stream);
absl::Status FillF32(float* x, int64_t count, float value, StreamHandle stream);

// ---- small-batch linear (gemv.cu) ----

// Most rows LinearSmallBatch takes: up to here a decode step's projections are weight reads, and
// one warp per weight row streaming it once (16-byte loads) beats cuBLAS's GEMM tiles.
inline constexpr int kSmallBatchMaxRows = 8;

// True when LinearSmallBatch can run this call: 1 <= m <= kSmallBatchMaxRows, k a multiple of 8
// and x, w 16-byte aligned (each weight row is read as 16-byte vectors).
bool LinearSmallBatchSupports(const Bf16* x, const Bf16* w, int m, int k);

// y[m, n] = x[m, k] · w[n, k]ᵀ + beta · y, row-major, F32 accumulation (y is not read when beta
// is 0): CublasGemm::Linear's path for decode-sized m. One warp per output column n reads
// weight row n once for all m rows. Twin: cpu::Linear (on the BF16 x and w).
absl::Status LinearSmallBatch(const Bf16* x, const Bf16* w, float* y, int m, int n, int k,
                              float beta, StreamHandle stream);

// ---- RMSNorm and RoPE (norm_rope.cu) ----

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * gain, F32 accumulation; y and/or y_bf16
// may be null; y may alias x. Twin: cpu::RmsNorm.
absl::Status RmsNorm(const float* x, const float* gain, float* y, Bf16* y_bf16, int rows, int dim,
                     float eps, StreamHandle stream);

// In-place HF rotate-half RoPE on `tokens` rows of num_heads * head_dim floats that are
// `row_stride` floats apart; the angle is the float32 product positions[t] * inv_freq[i]
// (cos/sin evaluated in double, then rounded, as the twin does). Twin: cpu::ApplyRope.
absl::Status ApplyRope(float* x, int tokens, int num_heads, int head_dim, int64_t row_stride,
                       const int32_t* positions, const float* inv_freq, StreamHandle stream);

// One sequence's cache, host-side view: positions [0, length) are filled. Writers outside the
// backend (the SCD GPU rebuild) store positions [length, length + T) and then commit them
// (common/runtime/cuda/backend_access.h).
struct SequenceCache {
  Bf16* k = nullptr;
  Bf16* v = nullptr;
  int64_t layer_stride = 0;  // elements between layers (capacity * kv_dim)
  int capacity = 0;
  int length = 0;
};

// Device arrays, one entry per sequence of a step: where each sequence's cache lives.
struct KvCacheTable {
  Bf16* const* k = nullptr;               // [num_seqs] layer-0 base of K
  Bf16* const* v = nullptr;               // [num_seqs] layer-0 base of V
  const int64_t* layer_stride = nullptr;  // [num_seqs] elements between layers (capacity*kv_dim)
};

// For each row r: applies RoPE at positions[r] to k_pre[r] and stores it, with v[r], as BF16
// into layer `layer` of sequence row_seq[r] at position positions[r]. k_pre and v rows are
// `in_stride` floats apart (kv_dim wide). Twin: cpu::ApplyRope + the cache copy of
// CpuBackend::Forward / AppendKv.
absl::Status RopeStoreKv(const float* k_pre, const float* v, int64_t in_stride, int rows,
                         const int32_t* row_seq, const int32_t* positions, KvCacheTable cache,
                         int layer, int num_kv_heads, int head_dim, const float* inv_freq,
                         StreamHandle stream);

// ---- attention (attention_prefill.cu, attention_prefill_tc.cu, attention_decode.cu) ----

enum class AttentionImpl {
  kAuto,        // tensor cores when head_dim is 64 or 128, else kGeneric
  kGeneric,     // F32 CUDA cores, any head_dim <= 256
  kTensorCore,  // BF16 WMMA (sm_80+), head_dim 64 or 128 only
  // BF16 mma.sync with register-resident fragments (FlashAttention-2's layout; sm_80+), head_dim
  // 64 or 128 only. Not yet run on a GPU, so kAuto does not pick it (attention_prefill_mma.cu).
  kTensorCoreMma,
};

// Causal GQA attention for `tokens` queries at positions [start, start + tokens) over one
// sequence's cache layer holding positions [0, start + tokens): flash-style tiles over keys
// with an online softmax (never materialising the score matrix).
//   q   rows of num_heads * head_dim F32 (RoPE applied), `q_stride` floats apart
//   k,v the layer's cache base (BF16, rows of kv_dim = num_kv_heads * head_dim)
//   out rows of num_heads * head_dim F32, `out_stride` floats apart
// Scores are scaled by 1/sqrt(head_dim); window > 0 limits each query to the last `window`
// positions. Twin: cpu::CausalAttention (on the BF16-rounded cache).
absl::Status PrefillAttention(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v,
                              float* out, int64_t out_stride, int tokens, int start, int num_heads,
                              int num_kv_heads, int head_dim, int window, AttentionImpl impl,
                              StreamHandle stream);

// True when `impl` can run head_dim (kAuto always can, for head_dim <= 256).
bool AttentionImplSupports(AttentionImpl impl, int head_dim);

// Which kernel DecodeAttention runs. Both take the same split plan and workspace.
enum class DecodeImpl {
  kAuto,     // kVectorized where it supports the shape, else kGeneric
  kGeneric,  // any shape split_plan::CheckDecodeShape accepts: a warp per key, 2-byte loads
  // 16-byte K/V loads, several keys per warp and several V rows per block at once: head_dim
  // 8, 16, 32, 64, 128 or 256, a GQA group of 1, 2, 4 or 8, group * head_dim <= 1024
  // (launch_checks::VectorizedAttentionSupports).
  kVectorized,
};

// One query per sequence (decode): row b of q attends to the cache of sequence b in `cache`
// at layer `layer`, positions [max(0, lengths[b] - window), lengths[b]) (lengths include the
// token being decoded, whose K/V must already be stored). Split-K: the keys are cut into
// chunks processed by separate blocks, whose partial softmax states (max, sum, output) a
// second kernel combines. `max_length` bounds lengths[] (host value, sizes the split and the
// workspace); each row spreads its own keys over all the splits, so a larger max_length than
// the batch needs (a bucket, as the CUDA backend's graphed decode step uses) costs only idle
// blocks.
// Twin: cpu::CausalAttention with tokens = 1, start = lengths[b] - 1.
absl::Status DecodeAttention(const float* q, int64_t q_stride, KvCacheTable cache, int layer,
                             const int32_t* lengths, int batch, int max_length, int num_heads,
                             int num_kv_heads, int head_dim, int window, DecodeImpl impl,
                             float* out, int64_t out_stride, float* workspace,
                             int64_t workspace_floats, StreamHandle stream);

// Floats of `workspace` DecodeAttention needs for this shape. Size it with the max_length of
// the call: the split plan is not monotonic in max_length, so a workspace sized for a longer
// context can be too small for a shorter one (DecodeAttention then refuses the call).
int64_t DecodeAttentionWorkspaceFloats(int batch, int max_length, int num_heads, int num_kv_heads,
                                       int head_dim);

// ---- logits (logits.cu) ----

// out[r] = -log softmax(logits[r, :])[targets[r]], the log-sum-exp summed in double as the
// twin does. Twin: cpu::NegLogLikelihood.
absl::Status NegLogLikelihood(const float* logits, const int32_t* targets, float* out, int rows,
                              int vocab, StreamHandle stream);

// out[r] = argmax of logits row r, lowest index on ties (greedy sampling on the device).
// Twin: scd::ArgMax (common/runtime/sampler.h).
absl::Status ArgmaxRows(const float* logits, int32_t* out, int rows, int vocab,
                        StreamHandle stream);

// ---- sampling (sampling.cu) ----

// One row's sampling parameters (SamplingParams) and its draw: `canonical` in [0, 1) is what
// the twin's generator yields for this step, std::generate_canonical<double, 53>(rng), which
// the twin scales by the kept mass (uniform_real_distribution(0, total)).
struct SampleParams {
  float temperature = 0.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = no limit
  float top_p = 1.0f;        // 1 = no limit
  int32_t pad = 0;
  double canonical = 0.0;
};

// out[r] = the token scd::Sampler::Sample (common/runtime/sampler.h) picks for logits row r
// with params[r] (device array) when its generator draws params[r].canonical: temperature,
// top-k, top-p, then the draw, on the device, so a step returns token ids instead of logits.
// Needs SampleRowsWorkspaceBytes(rows, vocab) bytes of device workspace; rows * vocab < 2^31.
// Twin: scd::Sampler::Sample (exact up to float rounding at a draw's boundary, see sampling.cu).
absl::Status SampleRows(const float* logits, const SampleParams* params, int rows, int vocab,
                        int32_t* out, void* workspace, size_t workspace_bytes, StreamHandle stream);
absl::StatusOr<size_t> SampleRowsWorkspaceBytes(int rows, int vocab);

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_OPS_H_
