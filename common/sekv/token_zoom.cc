// See token_zoom.h.
#include "common/sekv/token_zoom.h"

#include <algorithm>
#include <cmath>

namespace scd::sekv {

void ScoreSpanTokens(const SpanStore& store, int g, int span, const float* q, int group,
                     const float* lse, float scale, const uint8_t* skip,
                     std::vector<ScoredToken>* out, std::vector<float>* scratch) {
  const LowRankBasis& b = store.key_basis(span, g);
  const int n = b.rows, r = b.rank, d = b.cols;
  // y_h = V_rᵀ q_h for every query head of the group: [group, r].
  scratch->assign(static_cast<size_t>(group) * std::max(r, 1), 0.0f);
  for (int h = 0; h < group; ++h) {
    for (int j = 0; j < r; ++j) {
      const float* v = b.vt + static_cast<size_t>(j) * d;
      float z = 0;
      for (int c = 0; c < d; ++c) z += v[c] * q[static_cast<size_t>(h) * d + c];
      (*scratch)[static_cast<size_t>(h) * r + j] = z;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (skip != nullptr && skip[i]) continue;
    const float* u = b.us + static_cast<size_t>(i) * r;
    double w = 0;
    for (int h = 0; h < group; ++h) {
      const float* y = scratch->data() + static_cast<size_t>(h) * r;
      float s = 0;
      for (int j = 0; j < r; ++j) s += u[j] * y[j];
      w += std::exp(static_cast<double>(s * scale - lse[h]));
    }
    out->push_back({static_cast<float>(w), {span, i}});
  }
}

void KeepHeaviest(std::vector<ScoredToken>* tokens, int k) {
  auto heavier = [](const ScoredToken& a, const ScoredToken& b) {
    if (a.weight != b.weight) return a.weight > b.weight;
    if (a.ref.span != b.ref.span) return a.ref.span < b.ref.span;
    return a.ref.offset < b.ref.offset;
  };
  k = std::max(0, std::min(k, static_cast<int>(tokens->size())));
  std::partial_sort(tokens->begin(), tokens->begin() + k, tokens->end(), heavier);
  tokens->resize(k);
}

}  // namespace scd::sekv
