// See layer_pass.h.
#include "common/runtime/cuda/layer_pass.h"

#include <cstring>

#include "common/base/status_macros.h"

namespace scd::cuda {

absl::Status LayerPass::Reserve(int rows, bool hooks) {
  const ModelConfig& c = *config_;
  const size_t r = rows, d = c.hidden_size, qd = c.q_dim(), ffn = c.intermediate_size;
  const size_t qkv = qd + 2 * c.kv_dim();
  SCD_RETURN_IF_ERROR(x_.Reserve(sizeof(float) * r * d, "x"));
  SCD_RETURN_IF_ERROR(xn_bf16_.Reserve(sizeof(Bf16) * r * d, "xn"));
  SCD_RETURN_IF_ERROR(qkv_.Reserve(sizeof(float) * r * qkv, "qkv"));
  SCD_RETURN_IF_ERROR(att_.Reserve(sizeof(float) * r * qd, "attention"));
  SCD_RETURN_IF_ERROR(att_bf16_.Reserve(sizeof(Bf16) * r * qd, "attention bf16"));
  SCD_RETURN_IF_ERROR(gate_up_.Reserve(sizeof(float) * r * 2 * ffn, "gate_up"));
  SCD_RETURN_IF_ERROR(act_bf16_.Reserve(sizeof(Bf16) * r * ffn, "swiglu"));
  if (hooks) {
    SCD_RETURN_IF_ERROR(xn_.Reserve(sizeof(float) * r * d, "h_in"));
    SCD_RETURN_IF_ERROR(hooks_.Reserve(
        sizeof(float) * c.num_layers * r * static_cast<size_t>(HookWidth()), "hooks"));
  }
  return absl::OkStatus();
}

absl::Status LayerPass::Forward(int rows, const int32_t* ids, const int32_t* positions,
                                const int32_t* row_seq, const KvCacheTable& table,
                                const AttentionStep& attention, bool hooks) {
  const StreamHandle s = stream_;
  SCD_RETURN_IF_ERROR(clock_->Begin(s));
  SCD_RETURN_IF_ERROR(clock_->Mark(
      OpClass::kEmbed, Embed(weights_->embed(), ids, x_.as<float>(), rows, config_->hidden_size, s),
      s));
  for (int l = 0; l < config_->num_layers; ++l) {
    SCD_RETURN_IF_ERROR(LayerQkv(l, rows, positions, hooks));
    SCD_RETURN_IF_ERROR(LayerAttention(l, rows, positions, row_seq, table, attention));
    SCD_RETURN_IF_ERROR(LayerOutAndFfn(l, rows));
  }
  return absl::OkStatus();
}

absl::Status LayerPass::LayerQkv(int l, int rows, const int32_t* positions, bool hooks) {
  const ModelConfig& c = *config_;
  const int d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim();
  const int qkv_dim = qd + 2 * kvd;
  const StreamHandle s = stream_;
  float* x = x_.as<float>();
  Bf16* xn_bf16 = xn_bf16_.as<Bf16>();
  float* qkv = qkv_.as<float>();
  const DeviceLayer& w = weights_->layer(l);
  float* h_in = hooks ? xn_.as<float>() : nullptr;
  SCD_RETURN_IF_ERROR(clock_->Mark(
      OpClass::kNorm,
      RmsNorm(x, w.attn_norm.as<float>(), h_in, xn_bf16, rows, d, c.rms_norm_eps, s), s));
  SCD_RETURN_IF_ERROR(clock_->Mark(
      OpClass::kQkv, gemm_->Linear(xn_bf16, w.w_qkv.as<Bf16>(), qkv, rows, qkv_dim, d), s));
  if (!w.b_qkv.empty()) {
    SCD_RETURN_IF_ERROR(clock_->Mark(
        OpClass::kQkv, AddBias(qkv, w.b_qkv.as<float>(), rows, qkv_dim, qkv_dim, s), s));
  }
  if (hooks) {
    // Layer l's hooks: [rows][d] H_in, then [rows][2 kv_dim] pre-RoPE K | V.
    float* dst = hooks_.as<float>() + static_cast<size_t>(l) * rows * HookWidth();
    SCD_RETURN_IF_ERROR(
        clock_->Mark(OpClass::kElementwise,
                     CopyOnDevice(dst, h_in, sizeof(float) * static_cast<size_t>(rows) * d, s), s));
    SCD_RETURN_IF_ERROR(clock_->Mark(
        OpClass::kElementwise,
        CopyRowsOnDevice(dst + static_cast<size_t>(rows) * d, sizeof(float) * 2 * kvd, qkv + qd,
                         sizeof(float) * qkv_dim, sizeof(float) * 2 * kvd, rows, s),
        s));
  }
  return clock_->Mark(
      OpClass::kRopeKv,
      ApplyRope(qkv, rows, c.num_heads, c.head_dim, qkv_dim, positions, inv_freq_, s), s);
}

absl::Status LayerPass::LayerAttention(int l, int rows, const int32_t* positions,
                                       const int32_t* row_seq, const KvCacheTable& table,
                                       const AttentionStep& attention) {
  const ModelConfig& c = *config_;
  const int qd = c.q_dim(), kvd = c.kv_dim();
  const int qkv_dim = qd + 2 * kvd;
  const StreamHandle s = stream_;
  float* qkv = qkv_.as<float>();
  float* att = att_.as<float>();
  const float* inv_freq = inv_freq_;
  // Rows [0, plain) attend through the table (or the prefill's sequence), the rest
  // through their external attention.
  const int plain = rows - static_cast<int>(attention.external.size());
  if (plain > 0) {
    SCD_RETURN_IF_ERROR(
        clock_->Mark(OpClass::kRopeKv,
                     RopeStoreKv(qkv + qd, qkv + qd + kvd, qkv_dim, plain, row_seq, positions,
                                 table, l, c.num_kv_heads, c.head_dim, inv_freq, s),
                     s));
    if (attention.decode) {
      SCD_RETURN_IF_ERROR(
          clock_->Mark(OpClass::kAttention,
                       DecodeAttention(qkv, qkv_dim, table, l, attention.lengths, plain,
                                       attention.max_length, c.num_heads, c.num_kv_heads,
                                       c.head_dim, c.sliding_window, kernels_.decode_attention, att,
                                       qd, attention.workspace, attention.workspace_floats, s),
                       s));
    } else {
      const int64_t layer_offset = l * attention.layer_stride;
      SCD_RETURN_IF_ERROR(clock_->Mark(
          OpClass::kAttention,
          PrefillAttention(qkv, qkv_dim, attention.k0 + layer_offset, attention.v0 + layer_offset,
                           att, qd, rows, attention.start, c.num_heads, c.num_kv_heads, c.head_dim,
                           c.sliding_window, kernels_.prefill_attention, s),
          s));
    }
  }
  if (plain == rows) return absl::OkStatus();
  float* external_rows = qkv + static_cast<size_t>(plain) * qkv_dim;
  SCD_RETURN_IF_ERROR(clock_->Mark(OpClass::kRopeKv,
                                   ApplyRope(external_rows + qd, rows - plain, c.num_kv_heads,
                                             c.head_dim, qkv_dim, positions + plain, inv_freq, s),
                                   s));
  for (int r = plain; r < rows; ++r) {
    const float* row = qkv + static_cast<size_t>(r) * qkv_dim;
    SCD_RETURN_IF_ERROR(
        clock_->Mark(OpClass::kAttention,
                     attention.external[r - plain]->Attend(l, row, row + qd, row + qd + kvd,
                                                           att + static_cast<size_t>(r) * qd, s),
                     s));
  }
  return absl::OkStatus();
}

absl::Status LayerPass::LayerOutAndFfn(int l, int rows) {
  const ModelConfig& c = *config_;
  const int d = c.hidden_size, qd = c.q_dim(), ffn = c.intermediate_size;
  const StreamHandle s = stream_;
  float* x = x_.as<float>();
  Bf16* xn_bf16 = xn_bf16_.as<Bf16>();
  float* att = att_.as<float>();
  const DeviceLayer& w = weights_->layer(l);
  SCD_RETURN_IF_ERROR(
      clock_->Mark(OpClass::kElementwise,
                   F32ToBf16(att, att_bf16_.as<Bf16>(), static_cast<int64_t>(rows) * qd, s), s));
  SCD_RETURN_IF_ERROR(clock_->Mark(
      OpClass::kOutProj,
      gemm_->Linear(att_bf16_.as<Bf16>(), w.w_o.as<Bf16>(), x, rows, d, qd, /*beta=*/1.0f), s));
  SCD_RETURN_IF_ERROR(clock_->Mark(
      OpClass::kNorm,
      RmsNorm(x, w.ffn_norm.as<float>(), nullptr, xn_bf16, rows, d, c.rms_norm_eps, s), s));
  float* gate_up = gate_up_.as<float>();
  SCD_RETURN_IF_ERROR(
      clock_->Mark(OpClass::kGateUp,
                   gemm_->Linear(xn_bf16, w.w_gate_up.as<Bf16>(), gate_up, rows, 2 * ffn, d), s));
  SCD_RETURN_IF_ERROR(clock_->Mark(
      OpClass::kElementwise,
      SwiGlu(gate_up, gate_up + ffn, 2 * ffn, nullptr, act_bf16_.as<Bf16>(), rows, ffn, s), s));
  return clock_->Mark(
      OpClass::kDown,
      gemm_->Linear(act_bf16_.as<Bf16>(), w.w_down.as<Bf16>(), x, rows, d, ffn, /*beta=*/1.0f), s);
}

absl::Status LayerPass::Logits(const float* x, int rows, float* logits) {
  const ModelConfig& c = *config_;
  const StreamHandle s = stream_;
  SCD_RETURN_IF_ERROR(clock_->Mark(OpClass::kLogits,
                                   RmsNorm(x, weights_->final_norm(), nullptr, xn_bf16_.as<Bf16>(),
                                           rows, c.hidden_size, c.rms_norm_eps, s),
                                   s));
  return clock_->Mark(OpClass::kLogits,
                      gemm_->Linear(xn_bf16_.as<Bf16>(), weights_->lm_head(), logits, rows,
                                    c.vocab_size, c.hidden_size),
                      s);
}

void LayerPass::UnpackHooks(const std::vector<float>& hooks, int t,
                            std::vector<LayerStates>* out) const {
  const ModelConfig& c = *config_;
  const size_t d = c.hidden_size, kvd = c.kv_dim();
  out->resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    const float* base = hooks.data() + static_cast<size_t>(l) * t * HookWidth();
    LayerStates& states = (*out)[l];
    states.h_in.assign(base, base + t * d);
    states.k_pre_rope.resize(t * kvd);
    states.v.resize(t * kvd);
    const float* kv = base + t * d;
    for (int r = 0; r < t; ++r) {
      std::memcpy(states.k_pre_rope.data() + r * kvd, kv + r * 2 * kvd, kvd * sizeof(float));
      std::memcpy(states.v.data() + r * kvd, kv + r * 2 * kvd + kvd, kvd * sizeof(float));
    }
  }
}

size_t LayerPass::DeviceBytes() const {
  size_t bytes = 0;
  for (const DeviceBuffer* buffer :
       {&x_, &xn_, &xn_bf16_, &qkv_, &att_, &att_bf16_, &gate_up_, &act_bf16_, &hooks_}) {
    bytes += buffer->size();
  }
  return bytes;
}

void LayerPass::AppendGraphBuffers(std::vector<uintptr_t>* out) const {
  for (const DeviceBuffer* buffer :
       {&x_, &xn_bf16_, &qkv_, &att_, &att_bf16_, &gate_up_, &act_bf16_}) {
    out->push_back(reinterpret_cast<uintptr_t>(buffer->data()));
    out->push_back(buffer->size());
  }
}

}  // namespace scd::cuda
