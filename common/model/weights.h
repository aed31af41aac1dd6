// ModelWeights: the parameters of a Llama-family model, in host memory as F32, with the
// Hugging Face layout kept as-is: every projection W is [out_features, in_features] row-major
// and applied as y = x · Wᵀ. Q/K rows are already permuted for rotate-half RoPE (HF layout).
// Checkpoints in F16/BF16 are widened to F32 at load; backends may narrow again on device.
#ifndef SCD_COMMON_MODEL_WEIGHTS_H_
#define SCD_COMMON_MODEL_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/config.h"

namespace scd {

struct LayerWeights {
  std::vector<float> attn_norm;   // [d]
  std::vector<float> wq;          // [q_dim, d]
  std::vector<float> wk;          // [kv_dim, d]
  std::vector<float> wv;          // [kv_dim, d]
  std::vector<float> wo;          // [d, q_dim]
  std::vector<float> bq, bk, bv;  // [q_dim], [kv_dim], [kv_dim]; empty unless qkv_bias
  std::vector<float> ffn_norm;    // [d]
  std::vector<float> w_gate;      // [ffn, d]
  std::vector<float> w_up;        // [ffn, d]
  std::vector<float> w_down;      // [d, ffn]
};

struct ModelWeights {
  std::vector<float> embed;  // [vocab, d]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [d]
  std::vector<float> lm_head;     // [vocab, d]; empty when tied (use `embed`)

  const std::vector<float>& output_matrix() const { return lm_head.empty() ? embed : lm_head; }
  // Bytes a decode step streams: every layer matrix plus the output matrix (norms included).
  size_t DecodeBytesStreamed() const;
  size_t ParameterCount() const;
};

// A loaded model: config, weights and an identity digest of both.
struct Model {
  std::string dir;  // where it was loaded from ("" for synthetic models)
  ModelConfig config;
  ModelWeights weights;
  // Hex SHA-256 over the canonical config and every weight tensor's F32 bytes, in a fixed
  // order. Two checkpoints with equal digests compute the same function.
  std::string digest;
};

// Loads a Hugging Face checkpoint directory: config.json plus model.safetensors, or a
// sharded model.safetensors.index.json. Errors name the file and the tensor.
absl::StatusOr<std::shared_ptr<const Model>> LoadModel(const std::string& dir);

// A model with the given config and weights drawn from N(0, init_std²) with `seed`
// (norm gains are 1). For benchmarks and tests at shapes we have no checkpoint for.
std::shared_ptr<const Model> MakeSyntheticModel(const ModelConfig& config, uint64_t seed,
                                                float init_std = 0.02f);

// A "specialist" of `base` for timing runs at shapes we have no fine-tuned pair for: the same
// config with every non-norm weight perturbed by N(0, noise_std²) drawn from `seed`, so the
// pair shares an architecture and differs in weights as a fine-tune does.
std::shared_ptr<const Model> MakeNoisyVariant(const Model& base, float noise_std, uint64_t seed);

// Computes `model.digest`.
std::string ComputeModelDigest(const ModelConfig& config, const ModelWeights& weights);

}  // namespace scd

#endif  // SCD_COMMON_MODEL_WEIGHTS_H_
