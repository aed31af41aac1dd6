// HF NormalizedString::split semantics (tokenizers/src/tokenizer/normalizer.rs): the text is
// cut into alternating (range, is_match) parts; then per behaviour
//   Removed            keep only the gaps,
//   Isolated           keep every part on its own,
//   MergedWithPrevious glue each match to the part before it, unless that part is a match,
//   MergedWithNext     glue each match to the part after it, unless that part is a match,
//   Contiguous         glue runs of consecutive matches (or gaps) together.
// HF expresses these as folds over the whole part list (MergedWithNext as a fold from the
// right); here each is a left-to-right scan holding at most one pending piece. Regex matches
// are found left to right; where no alternative matches, the scan moves one character on.
#include "common/tokenizer/split.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/unicode.h"

namespace scd::tokenizer_internal {

SplitPattern SplitPattern::Literal(std::string literal) {
  SplitPattern p;
  p.literal_ = std::move(literal);
  return p;
}

SplitPattern SplitPattern::Regex(KnownRegex regex) {
  SplitPattern p;
  p.regex_ = regex;
  return p;
}

void SplitPattern::ForEachMatch(std::string_view text, RangeCallback f) const {
  if (regex_.has_value()) {
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = MatchKnownRegex(*regex_, text, pos);
      if (end > pos) {
        f(pos, end);
        pos = end;
      } else {
        pos += DecodeUtf8(text, pos).len;
      }
    }
    return;
  }
  if (literal_.empty()) return;
  for (size_t pos = text.find(literal_); pos != std::string_view::npos;
       pos = text.find(literal_, pos + literal_.size())) {
    f(pos, pos + literal_.size());
  }
}

absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported split behavior: ", absl::string_view(name.data(), name.size())));
}

void ForEachPiece(std::string_view text, const SplitPattern& pattern, SplitBehavior behavior,
                  bool invert, RangeCallback f) {
  // The pending piece, emitted once the next part shows whether it grows.
  bool has_pending = false;
  ByteRange pending;
  bool pending_is_match = false;
  auto emit = [&f](ByteRange r) {
    if (r.second > r.first) f(r.first, r.second);
  };
  auto flush = [&]() {
    if (has_pending) emit(pending);
    has_pending = false;
  };
  auto hold = [&](ByteRange r, bool is_match) {
    pending = r;
    pending_is_match = is_match;
    has_pending = true;
  };
  auto part = [&](size_t begin, size_t end, bool is_match) {
    const ByteRange r{begin, end};
    switch (behavior) {
      case SplitBehavior::kRemoved:
        if (!is_match) emit(r);
        return;
      case SplitBehavior::kIsolated:
        emit(r);
        return;
      case SplitBehavior::kMergedWithPrevious:
        if (is_match && has_pending && !pending_is_match) {
          pending.second = end;
          pending_is_match = true;
        } else {
          flush();
          hold(r, is_match);
        }
        return;
      case SplitBehavior::kMergedWithNext:
        if (!is_match && has_pending && pending_is_match) {
          emit({pending.first, end});
          has_pending = false;
        } else {
          flush();
          hold(r, is_match);
        }
        return;
      case SplitBehavior::kContiguous:
        if (has_pending && is_match == pending_is_match) {
          pending.second = end;
        } else {
          flush();
          hold(r, is_match);
        }
        return;
    }
  };
  size_t prev = 0;
  pattern.ForEachMatch(text, [&](size_t begin, size_t end) {
    if (begin > prev) part(prev, begin, invert);
    part(begin, end, !invert);
    prev = end;
  });
  if (prev < text.size()) part(prev, text.size(), invert);
  flush();
}

std::vector<ByteRange> SplitText(std::string_view text, const SplitPattern& pattern,
                                 SplitBehavior behavior, bool invert) {
  std::vector<ByteRange> pieces;
  ForEachPiece(text, pattern, behavior, invert,
               [&pieces](size_t begin, size_t end) { pieces.emplace_back(begin, end); });
  return pieces;
}

}  // namespace scd::tokenizer_internal
