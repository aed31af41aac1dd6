// Model cost: the work a forward pass must do, counted from the config alone, so that
// achieved rates do not depend on how a backend happens to schedule it.
//
// FLOPs of a prefill of T tokens at positions [s, s + T), producing logits for R rows
// (R = T with all_logits, else 1):
//   F = 2·T·L·P_layer + 2·R·P_out + L·4·q_dim·Σ_{t<T} n(s + t)
// where P_layer = |Wq| + |Wk| + |Wv| + |Wo| + |Wgate| + |Wup| + |Wdown| (one multiply-add,
// 2 flops, per parameter per token), P_out = vocab·d, and n(p) = min(p + 1, window) is the
// number of keys position p attends to. The attention term is QKᵀ (2·head_dim flops per
// query head per key) plus P·V (the same again): 2·2·n·q_dim per query per layer.
// Norms, RoPE, softmax, SiLU and biases are O(T·d) and not counted.
#ifndef SCD_COMMON_TOOLS_BENCH_MODEL_COST_H_
#define SCD_COMMON_TOOLS_BENCH_MODEL_COST_H_

#include <cstdint>

#include "common/model/config.h"

namespace scd::bench {

int64_t LayerMatmulParams(const ModelConfig& config);   // P_layer
int64_t OutputMatmulParams(const ModelConfig& config);  // P_out
// L·4·q_dim·Σ n(s + t): all layers' attention flops for T queries starting at position s.
double AttentionFlops(const ModelConfig& config, int start, int tokens);
// F above.
double PrefillFlops(const ModelConfig& config, int start, int tokens, int logits_rows);

}  // namespace scd::bench

#endif  // SCD_COMMON_TOOLS_BENCH_MODEL_COST_H_
