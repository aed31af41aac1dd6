// SurprisalSegmenter: cuts a prompt into anchors, spans and a full-resolution window from its
// per-token surprisal s_t = -log p(x_t | x_<t) (SeKV, Abaskohi et al. 2026, "Segmentation";
// docs/METHOD.md "SEKV"). The surprisal comes free with the producer's prefill (the SCD payload
// carries it) or, in oracle mode, from the decode daemon's own prefill.
//
// Rules, over positions [0, T):
//   - the first `sink_tokens` positions are anchors (the attention sink: BOS has no
//     surprisal, yet every head attends to it);
//   - the last `window` positions are the recent window, kept at full resolution (generated
//     tokens are appended to it later);
//   - in between, token t is a boundary when s_t > mean + alpha * std (statistics over
//     positions [1, T)) and at least `min_span` tokens separate it from the previous anchor;
//     boundaries are anchors;
//   - the tokens between two consecutive anchors (or an anchor and the window) form a span;
//     a span longer than `max_span` (0 = no limit) is cut into equal pieces of at most
//     max_span tokens.
// Invariant: anchors, spans and the window partition [0, T) exactly, in position order.
#ifndef SCD_COMMON_SEKV_SURPRISAL_SEGMENTER_H_
#define SCD_COMMON_SEKV_SURPRISAL_SEGMENTER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace scd::sekv {

struct SegmenterOptions {
  float alpha = 1.0f;   // boundary threshold in standard deviations above the mean
  int min_span = 4;     // minimum distance (tokens between) from one anchor to the next
  int max_span = 0;     // longest span; 0 = unlimited
  int sink_tokens = 1;  // leading positions that are always anchors
  int window = 32;      // trailing positions at full resolution

  absl::Status Validate() const;
};

struct TokenSpan {
  int begin = 0;  // first position
  int end = 0;    // one past the last position
  int length() const { return end - begin; }
};

struct Segmentation {
  int num_tokens = 0;
  std::vector<int> anchors;      // positions, ascending (sinks first)
  std::vector<TokenSpan> spans;  // ascending, disjoint
  int window_begin = 0;          // [window_begin, num_tokens) is the recent window
  float threshold = 0;           // mean + alpha * std of the surprisal

  int window_length() const { return num_tokens - window_begin; }
};

class SurprisalSegmenter {
 public:
  static absl::StatusOr<SurprisalSegmenter> Create(const SegmenterOptions& options);

  // Segments a prompt of surprisal.size() tokens. Never fails for a valid segmenter; a prompt
  // shorter than sink + window is all anchors and window.
  Segmentation Segment(absl::Span<const float> surprisal) const;

  const SegmenterOptions& options() const { return options_; }

 private:
  explicit SurprisalSegmenter(const SegmenterOptions& o) : options_(o) {}
  SegmenterOptions options_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SURPRISAL_SEGMENTER_H_
