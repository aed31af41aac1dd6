// See device_weights.h.
#include "common/runtime/cuda/device_weights.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

// Narrows the concatenation of `parts` to BF16 and copies it into `dst`.
absl::Status UploadBf16(const std::vector<const WeightBuffer*>& parts, const DeviceBuffer& dst) {
  std::vector<Bf16> host;
  host.reserve(dst.size() / sizeof(Bf16));
  for (const WeightBuffer* part : parts) {
    for (float f : *part) host.push_back(FloatToBf16(f));
  }
  if (host.size() * sizeof(Bf16) != dst.size()) {
    return absl::InternalError("DeviceWeights: tensor size does not match its allocation");
  }
  return CopyToDeviceSync(dst.data(), host.data(), dst.size());
}

absl::Status UploadF32(const std::vector<const WeightBuffer*>& parts, const DeviceBuffer& dst) {
  std::vector<float> host;
  host.reserve(dst.size() / sizeof(float));
  for (const WeightBuffer* part : parts) host.insert(host.end(), part->begin(), part->end());
  if (host.size() * sizeof(float) != dst.size()) {
    return absl::InternalError("DeviceWeights: tensor size does not match its allocation");
  }
  return CopyToDeviceSync(dst.data(), host.data(), dst.size());
}

}  // namespace

absl::Status DeviceWeights::Allocate(const ModelConfig& c) {
  const size_t d = c.hidden_size, qkv = c.q_dim() + 2 * c.kv_dim(), ffn = c.intermediate_size;
  const size_t vocab = c.vocab_size;
  auto alloc = [&](DeviceBuffer* buffer, size_t bytes, const std::string& what,
                   bool streamed) -> absl::Status {
    SCD_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Allocate(bytes, what));
    device_bytes_ += bytes;
    if (streamed) decode_bytes_ += bytes;
    return absl::OkStatus();
  };
  SCD_RETURN_IF_ERROR(alloc(&embed_, vocab * d * sizeof(Bf16), "embed", c.tie_word_embeddings));
  if (!c.tie_word_embeddings) {
    SCD_RETURN_IF_ERROR(alloc(&lm_head_, vocab * d * sizeof(Bf16), "lm_head", true));
  }
  SCD_RETURN_IF_ERROR(alloc(&final_norm_, d * sizeof(float), "final_norm", true));
  layers_.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    DeviceLayer& w = layers_[l];
    const std::string p = absl::StrCat("layer ", l, " ");
    SCD_RETURN_IF_ERROR(alloc(&w.attn_norm, d * sizeof(float), p + "attn_norm", true));
    SCD_RETURN_IF_ERROR(alloc(&w.w_qkv, qkv * d * sizeof(Bf16), p + "w_qkv", true));
    if (c.qkv_bias) {
      SCD_RETURN_IF_ERROR(alloc(&w.b_qkv, qkv * sizeof(float), p + "b_qkv", true));
    }
    SCD_RETURN_IF_ERROR(
        alloc(&w.w_o, d * static_cast<size_t>(c.q_dim()) * sizeof(Bf16), p + "w_o", true));
    SCD_RETURN_IF_ERROR(alloc(&w.ffn_norm, d * sizeof(float), p + "ffn_norm", true));
    SCD_RETURN_IF_ERROR(alloc(&w.w_gate_up, 2 * ffn * d * sizeof(Bf16), p + "w_gate_up", true));
    SCD_RETURN_IF_ERROR(alloc(&w.w_down, d * ffn * sizeof(Bf16), p + "w_down", true));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(const Model& model) {
  const ModelConfig& c = model.config;
  const ModelWeights& mw = model.weights;
  if (static_cast<int>(mw.layers.size()) != c.num_layers) {
    return absl::InvalidArgumentError("DeviceWeights: model weights do not match its config");
  }
  std::unique_ptr<DeviceWeights> w(new DeviceWeights());
  SCD_RETURN_IF_ERROR(w->Allocate(c));
  SCD_RETURN_IF_ERROR(UploadBf16({&mw.embed}, w->embed_));
  if (!c.tie_word_embeddings) {
    const WeightBuffer& head = mw.output_matrix();
    SCD_RETURN_IF_ERROR(UploadBf16({&head}, w->lm_head_));
  }
  SCD_RETURN_IF_ERROR(UploadF32({&mw.final_norm}, w->final_norm_));
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& src = mw.layers[l];
    DeviceLayer& dst = w->layers_[l];
    SCD_RETURN_IF_ERROR(UploadF32({&src.attn_norm}, dst.attn_norm));
    SCD_RETURN_IF_ERROR(UploadBf16({&src.wq, &src.wk, &src.wv}, dst.w_qkv));
    if (c.qkv_bias) SCD_RETURN_IF_ERROR(UploadF32({&src.bq, &src.bk, &src.bv}, dst.b_qkv));
    SCD_RETURN_IF_ERROR(UploadBf16({&src.wo}, dst.w_o));
    SCD_RETURN_IF_ERROR(UploadF32({&src.ffn_norm}, dst.ffn_norm));
    SCD_RETURN_IF_ERROR(UploadBf16({&src.w_gate, &src.w_up}, dst.w_gate_up));
    SCD_RETURN_IF_ERROR(UploadBf16({&src.w_down}, dst.w_down));
  }
  return w;
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Random(const ModelConfig& c,
                                                                     uint64_t seed, float init_std,
                                                                     StreamHandle stream) {
  std::unique_ptr<DeviceWeights> w(new DeviceWeights());
  SCD_RETURN_IF_ERROR(w->Allocate(c));
  uint64_t tensor = 0;
  auto matrix = [&](const DeviceBuffer& b) {
    return FillRandomBf16(b.as<Bf16>(), static_cast<int64_t>(b.size() / sizeof(Bf16)),
                          seed * 1000003ull + ++tensor, init_std, stream);
  };
  auto constant = [&](const DeviceBuffer& b, float value) {
    return FillF32(b.as<float>(), static_cast<int64_t>(b.size() / sizeof(float)), value, stream);
  };
  SCD_RETURN_IF_ERROR(matrix(w->embed_));
  if (!w->lm_head_.empty()) SCD_RETURN_IF_ERROR(matrix(w->lm_head_));
  SCD_RETURN_IF_ERROR(constant(w->final_norm_, 1.0f));
  for (DeviceLayer& layer : w->layers_) {
    SCD_RETURN_IF_ERROR(constant(layer.attn_norm, 1.0f));
    SCD_RETURN_IF_ERROR(matrix(layer.w_qkv));
    if (!layer.b_qkv.empty()) SCD_RETURN_IF_ERROR(constant(layer.b_qkv, 0.0f));
    SCD_RETURN_IF_ERROR(matrix(layer.w_o));
    SCD_RETURN_IF_ERROR(constant(layer.ffn_norm, 1.0f));
    SCD_RETURN_IF_ERROR(matrix(layer.w_gate_up));
    SCD_RETURN_IF_ERROR(matrix(layer.w_down));
  }
  SCD_RETURN_IF_ERROR(SynchronizeStream(stream));
  return w;
}

}  // namespace scd::cuda
