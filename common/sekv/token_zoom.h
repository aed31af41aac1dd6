// Token-resolution zoom-in: scoring a span's tokens in the CPU tier's low-rank coordinates.
//
// SeKV (docs/METHOD.md "SEKV") expands a routed span whole. With short prompts and a buffer of a
// few dozen tokens per (layer, KV head) a whole span is a coarse unit: most of its tokens
// draw no attention, yet each takes a buffer slot. The CPU tier already holds every span's
// keys as K_S ≈ (U_rΣ_r) V_rᵀ, so the exact score of each token is cheap there:
//   <q, k_t> = (U_rΣ_r)_t · (V_rᵀ q),
// r·d + |S|·r multiply-adds per span and query head instead of a rebuild. The zoom-in then
// moves only the tokens the query attends to into the buffer; the rest of the span stays
// represented by its summary with the count of the tokens left (mixed_attention.h: an entry
// with count c stands for c tokens with key k̄ and value v̄).
//
// Weight of token t for KV head g: w_t = Σ_{h ∈ g} exp(<q_h, k_t>/√d − LSE_h), its expected
// share of the group's attention, where LSE_h is the log-sum-exp of the resident entries
// (anchors, summaries with their counts, window, pinned tokens), so w_t is on the same scale
// for every span and step.
#ifndef SCD_COMMON_SEKV_TOKEN_ZOOM_H_
#define SCD_COMMON_SEKV_TOKEN_ZOOM_H_

#include <cstdint>
#include <vector>

#include "common/sekv/span_fetcher.h"
#include "common/sekv/span_store.h"

namespace scd::sekv {

struct ScoredToken {
  float weight = 0;
  TokenRef ref;
};

// Appends the tokens of span `span` of KV head `g` to `out`, weighted as above. q [group,
// head_dim] holds the group's query heads, lse [group] their resident log-sum-exps.
// skip [span length] (optional): tokens with skip[i] != 0 are left out. `scratch` is reused.
void ScoreSpanTokens(const SpanStore& store, int g, int span, const float* q, int group,
                     const float* lse, float scale, const uint8_t* skip,
                     std::vector<ScoredToken>* out, std::vector<float>* scratch);

// Keeps the `k` heaviest tokens (ties: lower span, then lower offset first), heaviest first.
void KeepHeaviest(std::vector<ScoredToken>* tokens, int k);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_TOKEN_ZOOM_H_
