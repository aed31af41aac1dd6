// See sekv_decoder.h.
#include "common/sekv/sekv_decoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/ops.h"

namespace scd::sekv {

SekvDecoder::SekvDecoder(std::shared_ptr<const Model> model)
    : model_(std::move(model)), inv_freq_(RopeInverseFrequencies(model_->config)) {
  const ModelConfig& c = model_->config;
  x_.resize(c.hidden_size);
  xn_.resize(c.hidden_size);
  tmp_.resize(c.hidden_size);
  q_.resize(c.q_dim());
  att_.resize(c.q_dim());
  k_.resize(c.kv_dim());
  v_.resize(c.kv_dim());
  gate_.resize(c.intermediate_size);
  up_.resize(c.intermediate_size);
}

absl::StatusOr<std::unique_ptr<SekvDecoder>> SekvDecoder::Create(
    std::shared_ptr<const Model> model) {
  if (model == nullptr) return absl::InvalidArgumentError("SekvDecoder: null model");
  if (static_cast<int>(model->weights.layers.size()) != model->config.num_layers) {
    return absl::InvalidArgumentError("model weights do not match its config (layer count)");
  }
  if (model->config.sliding_window > 0) {
    return absl::UnimplementedError("SEKV decoding does not support sliding-window attention");
  }
  return std::unique_ptr<SekvDecoder>(new SekvDecoder(std::move(model)));
}

absl::Status SekvDecoder::Step(int32_t token, int position, KvCache& cache,
                               std::vector<float>* logits) {
  const ModelConfig& c = model_->config;
  const ModelWeights& w = model_->weights;
  if (token < 0 || token >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", token, " outside the vocabulary"));
  }
  const int d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
  cpu::Embed(w.embed.data(), &token, x_.data(), 1, d);
  const int32_t pos = position;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    cpu::RmsNorm(x_.data(), lw.attn_norm.data(), xn_.data(), 1, d, c.rms_norm_eps);
    cpu::Linear(xn_.data(), lw.wq.data(), lw.bq.empty() ? nullptr : lw.bq.data(), q_.data(), 1, qd,
                d);
    cpu::Linear(xn_.data(), lw.wk.data(), lw.bk.empty() ? nullptr : lw.bk.data(), k_.data(), 1, kvd,
                d);
    cpu::Linear(xn_.data(), lw.wv.data(), lw.bv.empty() ? nullptr : lw.bv.data(), v_.data(), 1, kvd,
                d);
    cpu::ApplyRope(q_.data(), 1, c.num_heads, c.head_dim, &pos, inv_freq_.data());
    cpu::ApplyRope(k_.data(), 1, c.num_kv_heads, c.head_dim, &pos, inv_freq_.data());
    cache.Attend(l, q_.data(), k_.data(), v_.data(), att_.data());
    cpu::Linear(att_.data(), lw.wo.data(), nullptr, tmp_.data(), 1, d, qd);
    for (int i = 0; i < d; ++i) x_[i] += tmp_[i];
    cpu::RmsNorm(x_.data(), lw.ffn_norm.data(), xn_.data(), 1, d, c.rms_norm_eps);
    cpu::Linear(xn_.data(), lw.w_gate.data(), nullptr, gate_.data(), 1, ffn, d);
    cpu::Linear(xn_.data(), lw.w_up.data(), nullptr, up_.data(), 1, ffn, d);
    cpu::SwiGlu(gate_.data(), up_.data(), gate_.data(), ffn);
    cpu::Linear(gate_.data(), lw.w_down.data(), nullptr, tmp_.data(), 1, d, ffn);
    for (int i = 0; i < d; ++i) x_[i] += tmp_[i];
  }
  cpu::RmsNorm(x_.data(), w.final_norm.data(), x_.data(), 1, d, c.rms_norm_eps);
  logits->resize(c.vocab_size);
  cpu::Linear(x_.data(), w.output_matrix().data(), nullptr, logits->data(), 1, c.vocab_size, d);
  return absl::OkStatus();
}

absl::StatusOr<PrefixKv> SekvDecoder::MakePrefix(ExternalKv kv,
                                                 std::vector<float> surprisal) const {
  const ModelConfig& c = model_->config;
  const int t = kv.num_tokens;
  if (static_cast<int>(kv.k_pre_rope.size()) != c.num_layers ||
      static_cast<int>(kv.v.size()) != c.num_layers || static_cast<int>(surprisal.size()) != t) {
    return absl::InvalidArgumentError("external KV or surprisal does not match the model/prompt");
  }
  PrefixKv p;
  p.num_tokens = t;
  p.surprisal = std::move(surprisal);
  std::vector<int32_t> positions(t);
  for (int i = 0; i < t; ++i) positions[i] = i;
  const size_t want = static_cast<size_t>(t) * c.kv_dim();
  for (int l = 0; l < c.num_layers; ++l) {
    if (kv.k_pre_rope[l].size() != want || kv.v[l].size() != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("external KV of layer ", l, " has the wrong size"));
    }
    p.k.push_back(std::move(kv.k_pre_rope[l]));
    cpu::ApplyRope(p.k.back().data(), t, c.num_kv_heads, c.head_dim, positions.data(),
                   inv_freq_.data());
    p.v.push_back(std::move(kv.v[l]));
  }
  return p;
}

absl::StatusOr<PrefixKv> SekvDecoder::MakePrefix(const std::vector<LayerStates>& layers,
                                                 int num_tokens,
                                                 std::vector<float> surprisal) const {
  ExternalKv kv;
  kv.num_tokens = num_tokens;
  for (const LayerStates& s : layers) {
    kv.k_pre_rope.push_back(s.k_pre_rope);
    kv.v.push_back(s.v);
  }
  return MakePrefix(std::move(kv), std::move(surprisal));
}

}  // namespace scd::sekv
