// ModelConfig: the architecture description of a Hugging Face decoder-only checkpoint
// (config.json). One struct covers LlamaForCausalLM, MistralForCausalLM (sliding-window
// attention) and Qwen2ForCausalLM (q/k/v biases); they share the pre-norm Llama block:
//   h += Wo · Attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n),  n = RMSNorm(h)
//   h += Wdown · (silu(Wgate·m) ⊙ Wup·m),         m = RMSNorm(h)
// Invalid values are errors naming the key; missing optional keys take HF's defaults.
#ifndef SCD_COMMON_MODEL_CONFIG_H_
#define SCD_COMMON_MODEL_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace scd {

enum class Architecture { kLlama, kMistral, kQwen2 };

std::string_view ArchitectureName(Architecture arch);

// RoPE frequency scaling as HF's `rope_scaling` gives it. kNone when absent.
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  // Llama-3 ("rope_type": "llama3") only.
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture arch = Architecture::kLlama;
  std::string name;  // `_name_or_path`, or the directory name when absent
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // defaults to num_heads
  int head_dim = 0;      // defaults to hidden_size / num_heads
  int intermediate_size = 0;
  int vocab_size = 0;
  int max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;   // Qwen2: biases on q, k and v projections
  int sliding_window = 0;  // 0 = full attention (Mistral sets it)
  int bos_token_id = 1;
  std::vector<int> eos_token_ids;

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int group_size() const { return num_heads / num_kv_heads; }

  // Parses config.json text. `fallback_name` names the model when the JSON does not.
  static absl::StatusOr<ModelConfig> FromJson(std::string_view json_text,
                                              std::string_view fallback_name = "");
  // Reads `<dir>/config.json`.
  static absl::StatusOr<ModelConfig> FromDirectory(const std::string& dir);

  // Canonical JSON of the fields that define the computation (for digests and logs): every
  // field but `name`, keys sorted, floats in their shortest round-trip form.
  std::string ToCanonicalJson() const;

  // A Hugging Face config.json that FromJson reads back to this config (for writing
  // checkpoints: synthetic models, tests, tools). Llama has no sliding window and Qwen2
  // always has q/k/v biases in HF's schema; other fields round-trip exactly.
  std::string ToHfConfigJson() const;

  // Checks sizes and their relations (heads divide, head_dim even, ...). FromJson calls it;
  // call it on configs built by hand. InvalidArgument names the HF key.
  absl::Status Validate() const;
};

// RoPE inverse frequencies [head_dim / 2] after rope_scaling, as HF computes them.
std::vector<float> RopeInverseFrequencies(const ModelConfig& config);

}  // namespace scd

#endif  // SCD_COMMON_MODEL_CONFIG_H_
