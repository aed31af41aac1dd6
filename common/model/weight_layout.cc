// See weight_layout.h. Shapes are HF's nn.Linear layout [out_features, in_features].
#include "common/model/weight_layout.h"

#include "absl/strings/str_cat.h"

namespace scd {

int64_t WeightEntry::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool WeightEntry::is_norm() const {
  return field == WeightField::kAttnNorm || field == WeightField::kFfnNorm ||
         field == WeightField::kFinalNorm;
}

std::vector<WeightEntry> WeightLayout(const ModelConfig& config) {
  const int64_t d = config.hidden_size, q = config.q_dim(), kv = config.kv_dim();
  const int64_t ffn = config.intermediate_size, vocab = config.vocab_size;
  std::vector<WeightEntry> layout;
  layout.reserve(3 + static_cast<size_t>(config.num_layers) * 12);
  layout.push_back({"model.embed_tokens.weight", {vocab, d}, WeightField::kEmbed});
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    layout.push_back({p + "input_layernorm.weight", {d}, WeightField::kAttnNorm, l});
    layout.push_back({p + "self_attn.q_proj.weight", {q, d}, WeightField::kWq, l});
    layout.push_back({p + "self_attn.k_proj.weight", {kv, d}, WeightField::kWk, l});
    layout.push_back({p + "self_attn.v_proj.weight", {kv, d}, WeightField::kWv, l});
    layout.push_back({p + "self_attn.o_proj.weight", {d, q}, WeightField::kWo, l});
    if (config.qkv_bias) {
      layout.push_back({p + "self_attn.q_proj.bias", {q}, WeightField::kBq, l});
      layout.push_back({p + "self_attn.k_proj.bias", {kv}, WeightField::kBk, l});
      layout.push_back({p + "self_attn.v_proj.bias", {kv}, WeightField::kBv, l});
    }
    layout.push_back({p + "post_attention_layernorm.weight", {d}, WeightField::kFfnNorm, l});
    layout.push_back({p + "mlp.gate_proj.weight", {ffn, d}, WeightField::kWGate, l});
    layout.push_back({p + "mlp.up_proj.weight", {ffn, d}, WeightField::kWUp, l});
    layout.push_back({p + "mlp.down_proj.weight", {d, ffn}, WeightField::kWDown, l});
  }
  layout.push_back({"model.norm.weight", {d}, WeightField::kFinalNorm});
  if (!config.tie_word_embeddings) {
    layout.push_back({"lm_head.weight", {vocab, d}, WeightField::kLmHead});
  }
  return layout;
}

WeightBuffer& WeightData(ModelWeights& weights, const WeightEntry& entry) {
  switch (entry.field) {
    case WeightField::kEmbed:
      return weights.embed;
    case WeightField::kFinalNorm:
      return weights.final_norm;
    case WeightField::kLmHead:
      return weights.lm_head;
    default:
      break;
  }
  LayerWeights& layer = weights.layers[static_cast<size_t>(entry.layer)];
  switch (entry.field) {
    case WeightField::kAttnNorm:
      return layer.attn_norm;
    case WeightField::kWq:
      return layer.wq;
    case WeightField::kWk:
      return layer.wk;
    case WeightField::kWv:
      return layer.wv;
    case WeightField::kWo:
      return layer.wo;
    case WeightField::kBq:
      return layer.bq;
    case WeightField::kBk:
      return layer.bk;
    case WeightField::kBv:
      return layer.bv;
    case WeightField::kFfnNorm:
      return layer.ffn_norm;
    case WeightField::kWGate:
      return layer.w_gate;
    case WeightField::kWUp:
      return layer.w_up;
    case WeightField::kWDown:
    default:
      return layer.w_down;
  }
}

const WeightBuffer& WeightData(const ModelWeights& weights, const WeightEntry& entry) {
  return WeightData(const_cast<ModelWeights&>(weights), entry);
}

}  // namespace scd
