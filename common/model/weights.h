// ModelWeights: the parameters of a Llama-family model, in host memory as F32, with the
// Hugging Face layout kept as-is: every projection W is [out_features, in_features] row-major
// and applied as y = x · Wᵀ. Q/K rows are already permuted for rotate-half RoPE (HF layout).
// F32 tensors of a checkpoint are read-only views into the mapped file (WeightBuffer); F16 and
// BF16 ones are widened to F32 at load. Backends may narrow again on device.
#ifndef SCD_COMMON_MODEL_WEIGHTS_H_
#define SCD_COMMON_MODEL_WEIGHTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/config.h"
#include "common/model/weight_buffer.h"

namespace scd {

struct LayerWeights {
  WeightBuffer attn_norm;   // [d]
  WeightBuffer wq;          // [q_dim, d]
  WeightBuffer wk;          // [kv_dim, d]
  WeightBuffer wv;          // [kv_dim, d]
  WeightBuffer wo;          // [d, q_dim]
  WeightBuffer bq, bk, bv;  // [q_dim], [kv_dim], [kv_dim]; empty unless qkv_bias
  WeightBuffer ffn_norm;    // [d]
  WeightBuffer w_gate;      // [ffn, d]
  WeightBuffer w_up;        // [ffn, d]
  WeightBuffer w_down;      // [d, ffn]
};

struct ModelWeights {
  WeightBuffer embed;  // [vocab, d]
  std::vector<LayerWeights> layers;
  WeightBuffer final_norm;  // [d]
  WeightBuffer lm_head;     // [vocab, d]; empty when tied (use `embed`)

  const WeightBuffer& output_matrix() const { return lm_head.empty() ? embed : lm_head; }
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
  // order (ComputeModelDigest). Two checkpoints with equal digests compute the same function.
  // Computed on the first call, from any thread, then kept: hashing reads every weight byte
  // (a few hundred ms for a 100M-parameter model), which a process that never compares
  // models (generation, benchmarks) should not pay at load. The weights must not change once
  // it has been read.
  const std::string& digest() const;
  // Sets the digest when its producer already knows it (MakeSyntheticModel hashes each
  // chunk while it is in cache); it must equal ComputeModelDigest(config, weights).
  void set_digest(std::string digest);

 private:
  // A copy carries the digest when it is already known, and computes its own otherwise.
  // Assignment would have to forget a digest already read, so a Model is not assignable.
  class LazyDigest {
   public:
    LazyDigest() = default;
    LazyDigest(const LazyDigest& other);
    LazyDigest& operator=(const LazyDigest&) = delete;

    std::once_flag once;
    std::atomic<bool> known{false};
    std::string value;
  };
  mutable LazyDigest digest_;
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

// Computes `model.digest()`.
std::string ComputeModelDigest(const ModelConfig& config, const ModelWeights& weights);

}  // namespace scd

#endif  // SCD_COMMON_MODEL_WEIGHTS_H_
