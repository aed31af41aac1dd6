// DeviceWeights: a model's parameters in device memory, in the layout the CUDA forward pass
// wants. Matrices are BF16 in the HF layout W[out, in] (weights.h), with the projections that
// read the same input fused into one matrix so each is one GEMM:
//   w_qkv     = [Wq; Wk; Wv]     [q_dim + 2 kv_dim, d]  -> one GEMM gives q | k | v per row
//   w_gate_up = [Wgate; Wup]     [2 ffn, d]             -> SwiGLU reads the two halves
// Norm gains and q/k/v biases stay F32 (they are tiny and feed F32 arithmetic). A tied model
// uses the embedding matrix as its LM head (one copy). CUDA-free header.
//
// Two sources: Upload() narrows a host Model (F32) to BF16 with round-to-nearest-even;
// Random() draws the weights on the device (benchmarks at 7-8B shapes never build a host copy).
#ifndef SCD_COMMON_RUNTIME_CUDA_DEVICE_WEIGHTS_H_
#define SCD_COMMON_RUNTIME_CUDA_DEVICE_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/weights.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_memory.h"

namespace scd::cuda {

struct DeviceLayer {
  DeviceBuffer attn_norm;  // F32 [d]
  DeviceBuffer w_qkv;      // BF16 [q_dim + 2 kv_dim, d]
  DeviceBuffer b_qkv;      // F32 [q_dim + 2 kv_dim]; empty unless qkv_bias
  DeviceBuffer w_o;        // BF16 [d, q_dim]
  DeviceBuffer ffn_norm;   // F32 [d]
  DeviceBuffer w_gate_up;  // BF16 [2 ffn, d]
  DeviceBuffer w_down;     // BF16 [d, ffn]
};

class DeviceWeights {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(const Model& model);
  // Weights uniform with standard deviation `init_std` (hash of seed and index), norm gains
  // 1, biases 0. Runs on `stream` and waits for it.
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Random(const ModelConfig& config,
                                                               uint64_t seed, float init_std,
                                                               StreamHandle stream);

  const Bf16* embed() const { return embed_.as<Bf16>(); }
  const Bf16* lm_head() const { return lm_head_.empty() ? embed() : lm_head_.as<Bf16>(); }
  const float* final_norm() const { return final_norm_.as<float>(); }
  const DeviceLayer& layer(int l) const { return layers_[l]; }

  // Bytes one decode step reads: every layer tensor, the final norm and the LM head (the
  // embedding rows of the batch are negligible and not counted).
  size_t DecodeBytesStreamed() const { return decode_bytes_; }
  size_t DeviceBytes() const { return device_bytes_; }

 private:
  DeviceWeights() = default;
  absl::Status Allocate(const ModelConfig& config);

  DeviceBuffer embed_;       // BF16 [vocab, d]
  DeviceBuffer lm_head_;     // BF16 [vocab, d]; empty when tied
  DeviceBuffer final_norm_;  // F32 [d]
  std::vector<DeviceLayer> layers_;
  size_t decode_bytes_ = 0;
  size_t device_bytes_ = 0;
};

}  // namespace scd::cuda

#endif  // SCD_COMMON_RUNTIME_CUDA_DEVICE_WEIGHTS_H_
