// Model cost formulas; see model_cost.h for the derivation.
#include "common/tools/bench/model_cost.h"

#include <algorithm>

namespace scd::bench {

int64_t LayerMatmulParams(const ModelConfig& config) {
  const int64_t d = config.hidden_size;
  const int64_t q = config.q_dim();
  const int64_t kv = config.kv_dim();
  const int64_t ffn = config.intermediate_size;
  return d * q + 2 * d * kv + q * d + 3 * d * ffn;
}

int64_t OutputMatmulParams(const ModelConfig& config) {
  return static_cast<int64_t>(config.vocab_size) * config.hidden_size;
}

double AttentionFlops(const ModelConfig& config, int start, int tokens) {
  double keys = 0;
  for (int t = 0; t < tokens; ++t) {
    int n = start + t + 1;
    if (config.sliding_window > 0) n = std::min(n, config.sliding_window);
    keys += n;
  }
  return static_cast<double>(config.num_layers) * 4.0 * config.q_dim() * keys;
}

double PrefillFlops(const ModelConfig& config, int start, int tokens, int logits_rows) {
  return 2.0 * tokens * config.num_layers * static_cast<double>(LayerMatmulParams(config)) +
         2.0 * logits_rows * static_cast<double>(OutputMatmulParams(config)) +
         AttentionFlops(config, start, tokens);
}

}  // namespace scd::bench
