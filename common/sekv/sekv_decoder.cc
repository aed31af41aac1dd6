// See sekv_decoder.h.
#include "common/sekv/sekv_decoder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "kernels/cpu/ops.h"

namespace scd::sekv {

SekvDecoder::SekvDecoder(std::shared_ptr<const Model> model)
    : model_(std::move(model)), inv_freq_(RopeInverseFrequencies(model_->config)) {}

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
  KvCache* const one[] = {&cache};
  std::vector<std::vector<float>> out(1);
  SCD_RETURN_IF_ERROR(
      StepBatch(absl::MakeConstSpan(&token, 1), absl::MakeConstSpan(&position, 1), one, &out));
  *logits = std::move(out[0]);
  return absl::OkStatus();
}

absl::Status SekvDecoder::StepBatch(absl::Span<const int32_t> tokens,
                                    absl::Span<const int> positions,
                                    absl::Span<KvCache* const> caches,
                                    std::vector<std::vector<float>>* logits) {
  const ModelConfig& c = model_->config;
  const ModelWeights& w = model_->weights;
  const size_t n = tokens.size();
  if (positions.size() != n || caches.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("SEKV batch step: ", n, " tokens, ",
                                                   positions.size(), " positions and ",
                                                   caches.size(), " caches"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", tokens[i], " outside the vocabulary"));
    }
    if (caches[i] == nullptr) return absl::InvalidArgumentError("SEKV batch step: null cache");
  }
  logits->resize(n);
  if (n == 0) return absl::OkStatus();
  const int rows = static_cast<int>(n);
  const int d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
  for (auto [buffer, width] : {std::pair{&x_, d},
                               {&xn_, d},
                               {&tmp_, d},
                               {&q_, qd},
                               {&att_, qd},
                               {&k_, kvd},
                               {&v_, kvd},
                               {&gate_, ffn},
                               {&up_, ffn}}) {
    if (buffer->size() < n * width) buffer->resize(n * width);
  }
  cpu::Embed(w.embed.data(), tokens.data(), x_.data(), rows, d);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    cpu::RmsNorm(x_.data(), lw.attn_norm.data(), xn_.data(), rows, d, c.rms_norm_eps);
    cpu::Linear(xn_.data(), lw.wq.data(), lw.bq.empty() ? nullptr : lw.bq.data(), q_.data(), rows,
                qd, d);
    cpu::Linear(xn_.data(), lw.wk.data(), lw.bk.empty() ? nullptr : lw.bk.data(), k_.data(), rows,
                kvd, d);
    cpu::Linear(xn_.data(), lw.wv.data(), lw.bv.empty() ? nullptr : lw.bv.data(), v_.data(), rows,
                kvd, d);
    cpu::ApplyRope(q_.data(), rows, c.num_heads, c.head_dim, positions.data(), inv_freq_.data());
    cpu::ApplyRope(k_.data(), rows, c.num_kv_heads, c.head_dim, positions.data(), inv_freq_.data());
    for (size_t i = 0; i < n; ++i) {
      caches[i]->Attend(l, q_.data() + i * qd, k_.data() + i * kvd, v_.data() + i * kvd,
                        att_.data() + i * qd);
    }
    cpu::Linear(att_.data(), lw.wo.data(), nullptr, tmp_.data(), rows, d, qd);
    for (size_t i = 0; i < n * d; ++i) x_[i] += tmp_[i];
    cpu::RmsNorm(x_.data(), lw.ffn_norm.data(), xn_.data(), rows, d, c.rms_norm_eps);
    cpu::Linear(xn_.data(), lw.w_gate.data(), nullptr, gate_.data(), rows, ffn, d);
    cpu::Linear(xn_.data(), lw.w_up.data(), nullptr, up_.data(), rows, ffn, d);
    cpu::SwiGlu(gate_.data(), up_.data(), gate_.data(), rows * ffn);
    cpu::Linear(gate_.data(), lw.w_down.data(), nullptr, tmp_.data(), rows, d, ffn);
    for (size_t i = 0; i < n * d; ++i) x_[i] += tmp_[i];
  }
  cpu::RmsNorm(x_.data(), w.final_norm.data(), x_.data(), rows, d, c.rms_norm_eps);
  const size_t vocab = c.vocab_size;
  if (out_.size() < n * vocab) out_.resize(n * vocab);
  cpu::Linear(x_.data(), w.output_matrix().data(), nullptr, out_.data(), rows, c.vocab_size, d);
  for (size_t i = 0; i < n; ++i) {
    (*logits)[i].assign(out_.begin() + i * vocab, out_.begin() + (i + 1) * vocab);
  }
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
