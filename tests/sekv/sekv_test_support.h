// Shared inputs of the SEKV tests (tests/sekv, tests/cuda/gpu_sekv_test.cc): seeded normal
// vectors and fixed-size segmentations.
#ifndef SCD_TESTS_SEKV_SEKV_TEST_SUPPORT_H_
#define SCD_TESTS_SEKV_SEKV_TEST_SUPPORT_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/base/random.h"
#include "common/sekv/surprisal_segmenter.h"

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

}  // namespace scd::testing

#endif  // SCD_TESTS_SEKV_SEKV_TEST_SUPPORT_H_
