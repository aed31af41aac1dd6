// See kv_cache.h.
#include "common/sekv/kv_cache.h"

#include "common/sekv/mixed_attention.h"

namespace scd::sekv {

FullKvCache::FullKvCache(const CacheShape& shape, const PrefixKv& prefix)
    : shape_(shape), k_(prefix.k), v_(prefix.v) {}

void FullKvCache::Attend(int layer, const float* q, const float* k, const float* v, float* out) {
  const int kvd = shape_.kv_dim(), hd = shape_.head_dim;
  std::vector<float>& kl = k_[layer];
  std::vector<float>& vl = v_[layer];
  kl.insert(kl.end(), k, k + kvd);
  vl.insert(vl.end(), v, v + kvd);
  const int rows = static_cast<int>(kl.size() / kvd);
  for (int h = 0; h < shape_.num_heads; ++h) {
    const int g = h / shape_.group();
    const AttentionBlock all{kl.data() + g * hd, vl.data() + g * hd, rows, kvd, nullptr};
    MixedAttention(q + h * hd, {&all, 1}, hd, out + h * hd, &scratch_);
  }
}

MemoryBreakdown FullKvCache::Memory() const {
  MemoryBreakdown m;
  for (size_t l = 0; l < k_.size(); ++l) m.window += (k_[l].size() + v_[l].size()) * sizeof(float);
  m.full_kv = m.window;
  return m;
}

}  // namespace scd::sekv
