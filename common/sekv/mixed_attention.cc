// See mixed_attention.h.
#include "common/sekv/mixed_attention.h"

#include <algorithm>
#include <cmath>

namespace scd::sekv {

void PartialAttention::Reset(int head_dim) {
  max = -1e30f;
  sum = 0;
  acc.assign(head_dim, 0.0f);
}

void ScoreBlock(const float* q, const AttentionBlock& b, int d, float scale, float* scores) {
  for (int i = 0; i < b.rows; ++i) {
    const float* k = b.k + static_cast<size_t>(i) * b.stride;
    float s = 0;
    for (int c = 0; c < d; ++c) s += q[c] * k[c];
    scores[i] = s * scale + (b.log_count != nullptr ? b.log_count[i] : 0.0f);
  }
}

void AccumulateScored(const float* scores, const AttentionBlock& b, int d, const uint8_t* skip,
                      PartialAttention* p) {
  float m = p->max;
  for (int i = 0; i < b.rows; ++i) {
    if (skip == nullptr || !skip[i]) m = std::max(m, scores[i]);
  }
  if (m > p->max) {
    const float r = std::exp(p->max - m);
    p->sum *= r;
    for (int c = 0; c < d; ++c) p->acc[c] *= r;
    p->max = m;
  }
  float* acc = p->acc.data();
  for (int i = 0; i < b.rows; ++i) {
    if (skip != nullptr && skip[i]) continue;
    const float w = std::exp(scores[i] - m);
    p->sum += w;
    const float* v = b.v + static_cast<size_t>(i) * b.stride;
    for (int c = 0; c < d; ++c) acc[c] += w * v[c];
  }
}

void AccumulateBlock(const float* q, const AttentionBlock& b, int d, float scale,
                     PartialAttention* p, std::vector<float>* scratch) {
  if (b.rows <= 0) return;
  if (scratch->size() < static_cast<size_t>(b.rows)) scratch->resize(b.rows);
  ScoreBlock(q, b, d, scale, scratch->data());
  AccumulateScored(scratch->data(), b, d, nullptr, p);
}

void FinishAttention(const PartialAttention& p, int d, float* out) {
  const float inv = p.sum > 0 ? static_cast<float>(1.0 / p.sum) : 0.0f;
  for (int c = 0; c < d; ++c) out[c] = p.acc[c] * inv;
}

void MixedAttention(const float* q, absl::Span<const AttentionBlock> blocks, int d, float* out,
                    std::vector<float>* scratch) {
  PartialAttention p;
  p.Reset(d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (const AttentionBlock& b : blocks) AccumulateBlock(q, b, d, scale, &p, scratch);
  FinishAttention(p, d, out);
}

}  // namespace scd::sekv
