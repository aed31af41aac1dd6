// Small hand-built configs for model tests: every architecture at a size that saves and
// loads in milliseconds, with GQA and a head_dim that differs from hidden/heads.
#ifndef SCD_TESTS_MODEL_TINY_CONFIG_H_
#define SCD_TESTS_MODEL_TINY_CONFIG_H_

#include "common/model/config.h"

namespace scd::testing {

inline ModelConfig TinyConfig(Architecture arch = Architecture::kLlama, bool tied = false) {
  ModelConfig config;
  config.arch = arch;
  config.name = "tiny";
  config.hidden_size = 24;
  config.num_layers = 3;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.head_dim = 8;  // q_dim 32 != hidden 24
  config.intermediate_size = 40;
  config.vocab_size = 50;
  config.max_position_embeddings = 128;
  config.rms_norm_eps = 1e-5f;
  config.tie_word_embeddings = tied;
  config.qkv_bias = arch == Architecture::kQwen2;
  config.sliding_window = arch == Architecture::kMistral ? 16 : 0;
  config.eos_token_ids = {2};
  return config;
}

}  // namespace scd::testing

#endif  // SCD_TESTS_MODEL_TINY_CONFIG_H_
