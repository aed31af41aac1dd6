// WeightLayout: the Hugging Face name and shape of every weight tensor a config implies, in
// one fixed order (embeddings, then per layer: input norm, q, k, v, o, q/k/v biases,
// post-attention norm, gate, up, down; then the final norm and an untied lm_head). Loading,
// saving and the model digest all walk this list, so they can never disagree on names,
// shapes or order.
#ifndef SCD_COMMON_MODEL_WEIGHT_LAYOUT_H_
#define SCD_COMMON_MODEL_WEIGHT_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/model/config.h"
#include "common/model/weights.h"

namespace scd {

enum class WeightField {
  kEmbed,
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kWo,
  kBq,
  kBk,
  kBv,
  kFfnNorm,
  kWGate,
  kWUp,
  kWDown,
  kFinalNorm,
  kLmHead,
};

struct WeightEntry {
  std::string name;            // e.g. "model.layers.3.self_attn.k_proj.weight"
  std::vector<int64_t> shape;  // e.g. {kv_dim, hidden_size}
  WeightField field;
  int layer = -1;  // -1 for tensors outside the layers

  int64_t NumElements() const;
  // RMSNorm gains (initialised to 1 in synthetic models).
  bool is_norm() const;
};

// Every tensor `config` needs: biases only with qkv_bias, lm_head only when untied.
std::vector<WeightEntry> WeightLayout(const ModelConfig& config);

// The storage `entry` names inside `weights` (layers must already be sized).
WeightBuffer& WeightData(ModelWeights& weights, const WeightEntry& entry);
const WeightBuffer& WeightData(const ModelWeights& weights, const WeightEntry& entry);

}  // namespace scd

#endif  // SCD_COMMON_MODEL_WEIGHT_LAYOUT_H_
