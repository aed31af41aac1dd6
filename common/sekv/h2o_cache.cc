// See h2o_cache.h.
#include "common/sekv/h2o_cache.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/sekv/mixed_attention.h"

namespace scd::sekv {

absl::StatusOr<std::unique_ptr<HeavyHitterCache>> HeavyHitterCache::Create(
    const CacheShape& shape, const PrefixKv& prefix, const HeavyHitterOptions& options) {
  if (options.budget_tokens < 1 || options.window < 0 || options.sink_tokens < 0 ||
      options.pool_radius < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid heavy-hitter options (budget ", options.budget_tokens, ")"));
  }
  std::unique_ptr<HeavyHitterCache> c(new HeavyHitterCache());
  c->shape_ = shape;
  c->options_ = options;
  c->prompt_tokens_ = prefix.num_tokens;
  c->prompt_k_ = prefix.k;
  c->prompt_v_ = prefix.v;
  c->k_.assign(shape.num_layers, std::vector<std::vector<float>>(shape.num_kv_heads));
  c->v_ = c->k_;
  c->selected_.assign(shape.num_layers, 0);
  return c;
}

void HeavyHitterCache::Select(int l, const float* q) {
  const int t = prompt_tokens_, hd = shape_.head_dim, kvd = shape_.kv_dim();
  const int group = shape_.group();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int sinks = std::min(options_.sink_tokens, t);
  const int win_begin = std::max(sinks, t - options_.window);
  const int hits =
      std::max(0, std::min(options_.budget_tokens - sinks - (t - win_begin), win_begin - sinks));
  std::vector<float> s(t), weight(t), pooled(t);
  for (int g = 0; g < shape_.num_kv_heads; ++g) {
    std::fill(weight.begin(), weight.end(), 0.0f);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      ScoreBlock(q + h * hd, {prompt_k_[l].data() + g * hd, nullptr, t, kvd, nullptr}, hd, scale,
                 s.data());
      const float m = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (int i = 0; i < t; ++i) sum += std::exp(s[i] - m);
      for (int i = 0; i < t; ++i) weight[i] += static_cast<float>(std::exp(s[i] - m) / sum);
    }
    for (int i = 0; i < t; ++i) {
      float best = 0;
      for (int j = std::max(0, i - options_.pool_radius);
           j <= std::min(t - 1, i + options_.pool_radius); ++j) {
        best = std::max(best, weight[j]);
      }
      pooled[i] = best;
    }
    std::vector<int> cand(win_begin - sinks);
    std::iota(cand.begin(), cand.end(), sinks);
    std::stable_sort(cand.begin(), cand.end(), [&](int a, int b) { return pooled[a] > pooled[b]; });
    std::vector<int> keep(cand.begin(), cand.begin() + hits);
    for (int i = 0; i < sinks; ++i) keep.push_back(i);
    for (int i = win_begin; i < t; ++i) keep.push_back(i);
    std::sort(keep.begin(), keep.end());
    auto& kk = k_[l][g];
    auto& vv = v_[l][g];
    for (int i : keep) {
      const float* kr = prompt_k_[l].data() + static_cast<size_t>(i) * kvd + g * hd;
      const float* vr = prompt_v_[l].data() + static_cast<size_t>(i) * kvd + g * hd;
      kk.insert(kk.end(), kr, kr + hd);
      vv.insert(vv.end(), vr, vr + hd);
    }
  }
  std::vector<float>().swap(prompt_k_[l]);
  std::vector<float>().swap(prompt_v_[l]);
  selected_[l] = 1;
}

void HeavyHitterCache::Attend(int l, const float* q, const float* k, const float* v, float* out) {
  if (!selected_[l]) Select(l, q);
  const int hd = shape_.head_dim, group = shape_.group();
  if (l == 0) ++generated_;
  for (int g = 0; g < shape_.num_kv_heads; ++g) {
    k_[l][g].insert(k_[l][g].end(), k + g * hd, k + (g + 1) * hd);
    v_[l][g].insert(v_[l][g].end(), v + g * hd, v + (g + 1) * hd);
  }
  for (int h = 0; h < shape_.num_heads; ++h) {
    const int g = h / group;
    const AttentionBlock b{k_[l][g].data(), v_[l][g].data(), static_cast<int>(k_[l][g].size() / hd),
                           hd, nullptr};
    MixedAttention(q + h * hd, {&b, 1}, hd, out + h * hd, &scratch_);
  }
}

MemoryBreakdown HeavyHitterCache::Memory() const {
  MemoryBreakdown m;
  const size_t row = static_cast<size_t>(shape_.kv_dim()) * 2 * sizeof(float);
  for (int l = 0; l < shape_.num_layers; ++l) {
    if (selected_[l]) {
      for (int g = 0; g < shape_.num_kv_heads; ++g) {
        m.window += (k_[l][g].size() + v_[l][g].size()) * sizeof(float);
      }
    } else {  // not selected yet: the prompt is still whole (a prefill's cache)
      m.window += (prompt_k_[l].size() + prompt_v_[l].size()) * sizeof(float);
    }
  }
  m.full_kv = static_cast<size_t>(shape_.num_layers) * (prompt_tokens_ + generated_) * row;
  return m;
}

}  // namespace scd::sekv
