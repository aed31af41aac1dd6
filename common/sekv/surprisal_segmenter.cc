// See surprisal_segmenter.h.
#include "common/sekv/surprisal_segmenter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace scd::sekv {

absl::Status SegmenterOptions::Validate() const {
  if (!std::isfinite(alpha)) return absl::InvalidArgumentError("sekv alpha must be finite");
  if (min_span < 1)
    return absl::InvalidArgumentError(absl::StrCat("sekv min_span ", min_span, " < 1"));
  if (max_span < 0 || (max_span > 0 && max_span < min_span)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sekv max_span ", max_span, " must be 0 or >= min_span ", min_span));
  }
  if (sink_tokens < 0 || window < 0) {
    return absl::InvalidArgumentError("sekv sink_tokens and window must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<SurprisalSegmenter> SurprisalSegmenter::Create(const SegmenterOptions& options) {
  if (auto st = options.Validate(); !st.ok()) return st;
  return SurprisalSegmenter(options);
}

Segmentation SurprisalSegmenter::Segment(absl::Span<const float> surprisal) const {
  const SegmenterOptions& o = options_;
  Segmentation seg;
  const int t = static_cast<int>(surprisal.size());
  seg.num_tokens = t;
  const int sinks = std::min(o.sink_tokens, t);
  seg.window_begin = std::max(sinks, t - o.window);
  for (int i = 0; i < sinks; ++i) seg.anchors.push_back(i);

  double sum = 0, sum2 = 0;
  int n = 0;
  for (int i = 1; i < t; ++i) {
    sum += surprisal[i];
    sum2 += static_cast<double>(surprisal[i]) * surprisal[i];
    ++n;
  }
  const double mean = n > 0 ? sum / n : 0;
  const double var = n > 0 ? std::max(0.0, sum2 / n - mean * mean) : 0;
  seg.threshold = static_cast<float>(mean + o.alpha * std::sqrt(var));

  auto add_span = [&](int begin, int end) {
    const int len = end - begin;
    if (len <= 0) return;
    const int pieces = o.max_span > 0 ? (len + o.max_span - 1) / o.max_span : 1;
    for (int p = 0; p < pieces; ++p) {
      seg.spans.push_back({begin + static_cast<int>(static_cast<long>(len) * p / pieces),
                           begin + static_cast<int>(static_cast<long>(len) * (p + 1) / pieces)});
    }
  };
  int span_begin = sinks;  // first position after the last anchor
  for (int i = sinks; i < seg.window_begin; ++i) {
    if (surprisal[i] > seg.threshold && i - span_begin >= o.min_span) {
      add_span(span_begin, i);
      seg.anchors.push_back(i);
      span_begin = i + 1;
    }
  }
  add_span(span_begin, seg.window_begin);
  return seg;
}

}  // namespace scd::sekv
