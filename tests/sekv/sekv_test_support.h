// Shared inputs of the SEKV tests (tests/sekv, tests/gpu/parity/gpu_sekv_test.cc): seeded normal
// vectors and fixed-size segmentations.
#ifndef SCD_TESTS_SEKV_SEKV_TEST_SUPPORT_H_
#define SCD_TESTS_SEKV_SEKV_TEST_SUPPORT_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/random.h"
#include "common/sekv/kv_cache.h"
#include "common/sekv/surprisal_segmenter.h"
#include "common/sekv/zoom_router.h"

namespace scd::testing {

inline std::vector<float> Normal(size_t n, uint64_t seed, float std = 1.0f) {
  std::vector<float> v(n);
  FillNormal(v.data(), n, seed, 0.0f, std);
  return v;
}

// `anchors` (sorted, below t - window), spans of at most `span` tokens between them, then a
// window of the last `window` tokens.
inline sekv::Segmentation ChunkedSegmentation(int t, int span, int window,
                                              std::vector<int> anchors) {
  sekv::Segmentation seg;
  seg.num_tokens = t;
  seg.window_begin = t - window;
  seg.anchors = std::move(anchors);
  size_t next = 0;  // the first anchor at or after b
  for (int b = 0; b < seg.window_begin;) {
    while (next < seg.anchors.size() && seg.anchors[next] < b) ++next;
    if (next < seg.anchors.size() && seg.anchors[next] == b) {
      ++b;
      continue;
    }
    int e = std::min(b + span, seg.window_begin);
    if (next < seg.anchors.size()) e = std::min(e, seg.anchors[next]);
    seg.spans.push_back({b, e});
    b = e;
  }
  return seg;
}

// A router with seeded random projections (route_dim 4) and one fixed gate per (layer, KV
// head) that opens for a share of the spans: exercises every term of the gate.
inline std::shared_ptr<sekv::ZoomRouter> RandomRouter(const sekv::CacheShape& shape) {
  auto r = std::make_shared<sekv::ZoomRouter>();
  r->Reset(shape.num_layers, shape.num_kv_heads, shape.head_dim, 4);
  r->all_p_q() = Normal(r->all_p_q().size(), 7, 0.3f);
  r->all_p_k() = Normal(r->all_p_k().size(), 8, 0.3f);
  for (int l = 0; l < shape.num_layers; ++l) {
    for (int g = 0; g < shape.num_kv_heads; ++g) r->gate(l, g) = {0.2f, 0.8f, 1.0f, 0.4f};
  }
  return r;
}

}  // namespace scd::testing

#endif  // SCD_TESTS_SEKV_SEKV_TEST_SUPPORT_H_
