// CPU reference kernels: the specification every other backend is tested against
// (kernels/cuda mirrors each function here and has a parity test). Row-major F32 throughout.
// Matrix weights keep the Hugging Face layout W[out, in] and are applied as y = x · Wᵀ.
#ifndef SCD_KERNELS_CPU_OPS_H_
#define SCD_KERNELS_CPU_OPS_H_

#include <cstdint>

namespace scd::cpu {

// y[M, N] = x[M, K] · W[N, K]ᵀ (+ bias[N] when non-null). SmallBatchLinear for M <= 16 (a
// decode step: one sequence or a batch, each row the same bits either way); OpenBLAS sgemm
// above (see ops.cc).
void Linear(const float* x, const float* w, const float* bias, float* y, int m, int n, int k);

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * gain, for r in [0, rows). y may alias x.
void RmsNorm(const float* x, const float* gain, float* y, int rows, int dim, float eps);

// In-place HF rotate-half RoPE on x[T, num_heads * head_dim]: for each head and i < head_dim/2,
// (a, b) = (x[i], x[i + head_dim/2]) is rotated by angle positions[t] * inv_freq[i].
void ApplyRope(float* x, int tokens, int num_heads, int head_dim, const int32_t* positions,
               const float* inv_freq);

// The cos/sin table ApplyRope uses: cos_out/sin_out [tokens, head_dim / 2], angle in float32.
void RopeTable(int tokens, int head_dim, const int32_t* positions, const float* inv_freq,
               float* cos_out, float* sin_out);
// ApplyRope with a precomputed table (shared by Q and K and by every layer of a forward pass).
void ApplyRopeTable(float* x, int tokens, int num_heads, int head_dim, const float* cos_t,
                    const float* sin_t);

// out[T, ffn] = silu(gate) ⊙ up.
void SwiGlu(const float* gate, const float* up, float* out, int count);

// In-place numerically stable softmax of each row of x[rows, cols].
void SoftmaxRows(float* x, int rows, int cols);

// Causal GQA attention for `tokens` queries at positions [start, start + tokens) against a
// KV cache holding positions [0, start + tokens):
//   q   [tokens, num_heads * head_dim]     (RoPE applied)
//   k,v [>= start + tokens, num_kv_heads * head_dim] (k with RoPE applied)
//   out [tokens, num_heads * head_dim]
// Query head h reads KV head h / (num_heads / num_kv_heads). Scores are scaled by
// 1/sqrt(head_dim). window > 0 limits each query to the last `window` positions (Mistral).
// `scratch` must hold AttentionScratchFloats(...) floats.
void CausalAttention(const float* q, const float* k, const float* v, float* out, int tokens,
                     int start, int num_heads, int num_kv_heads, int head_dim, int window,
                     float* scratch);
long AttentionScratchFloats(int tokens, int start, int num_heads);

// Embedding lookup: out[t, :] = table[ids[t], :].
void Embed(const float* table, const int32_t* ids, float* out, int tokens, int dim);

// out[i] = -log softmax(logits[i, :])[targets[i]] for i in [0, rows).
void NegLogLikelihood(const float* logits, const int32_t* targets, float* out, int rows, int vocab);

}  // namespace scd::cpu

#endif  // SCD_KERNELS_CPU_OPS_H_
