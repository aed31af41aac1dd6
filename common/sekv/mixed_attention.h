// Mixed-resolution attention (SeKV "zoom-in": one softmax over anchors, unexpanded span
// summaries, expanded spans' rebuilt tokens and the recent window; docs/METHOD.md "SEKV").
//
// For one query head q [d] and entries (k_i, v_i, c_i) from several blocks:
//   s_i = <q, k_i> / sqrt(d) + log c_i,   out = Σ_i softmax(s)_i v_i,
// where c_i = 1 for a token and c_i = |S| for a span summary. The log|S| term makes one
// summary entry stand for |S| tokens: if every token of S had key k̄ and value v̄, the |S|
// entries would contribute |S|·e^{<q,k̄>/√d}·v̄, which is exactly e^{<q,k̄>/√d + log|S|}·v̄.
//
// The softmax is computed blockwise with the usual running-max rescaling (a PartialAttention
// holds max m, Σ e^{s-m} and Σ e^{s-m} v), so a block that arrives later (an expanded span
// still being rebuilt) merges into the same softmax without revisiting earlier blocks. The
// result equals one softmax over the concatenation up to float rounding.
#ifndef SCD_COMMON_SEKV_MIXED_ATTENTION_H_
#define SCD_COMMON_SEKV_MIXED_ATTENTION_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace scd::sekv {

// `rows` entries of one head: k and v point at the head's first element of row 0 and
// advance by `stride` floats per row. log_count (optional, [rows]) is added to each score.
struct AttentionBlock {
  const float* k = nullptr;
  const float* v = nullptr;
  int rows = 0;
  int stride = 0;
  const float* log_count = nullptr;
};

struct PartialAttention {
  float max = -1e30f;
  double sum = 0;
  std::vector<float> acc;  // [d], Σ e^{s - max} v

  void Reset(int head_dim);
};

// scores[i] = <q, k_i> * scale (+ log_count[i]) for the block's rows.
void ScoreBlock(const float* q, const AttentionBlock& block, int head_dim, float scale,
                float* scores);

// Adds the block's entries with precomputed `scores` to `p`; entries with skip[i] != 0 (when
// skip is non-null) are left out.
void AccumulateScored(const float* scores, const AttentionBlock& block, int head_dim,
                      const uint8_t* skip, PartialAttention* p);

// Scores and accumulates a block (scratch grows to block.rows).
void AccumulateBlock(const float* q, const AttentionBlock& block, int head_dim, float scale,
                     PartialAttention* p, std::vector<float>* scratch);

// out[d] = acc / sum (zeros when nothing was accumulated).
void FinishAttention(const PartialAttention& p, int head_dim, float* out);

// log Σ e^{s} over everything accumulated.
inline double LogSumExp(const PartialAttention& p) {
  return p.sum > 0 ? p.max + std::log(p.sum) : -1e30;
}

// One softmax over all `blocks` for query q [head_dim]; scale = 1/sqrt(head_dim).
void MixedAttention(const float* q, absl::Span<const AttentionBlock> blocks, int head_dim,
                    float* out, std::vector<float>* scratch);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_MIXED_ATTENTION_H_
