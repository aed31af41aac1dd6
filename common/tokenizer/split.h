// Splitting a string on a pattern, as Hugging Face's NormalizedString::split does for the
// Split, Metaspace and ByteLevel pre-tokenizers: the pattern's matches and the gaps between
// them cover the text; the delimiter behaviour then decides what happens to the matches
// (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous), `invert` swaps matches
// and gaps, and empty pieces are dropped. Pieces are produced through a callback, one part of
// lookahead at most, so splitting a large input allocates nothing proportional to it.
#ifndef SCD_COMMON_TOKENIZER_SPLIT_H_
#define SCD_COMMON_TOKENIZER_SPLIT_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/known_regex.h"

namespace scd::tokenizer_internal {

using ByteRange = std::pair<size_t, size_t>;  // [first, second) byte offsets
using RangeCallback = absl::FunctionRef<void(size_t begin, size_t end)>;

// A literal string or one of the recognised regexes.
class SplitPattern {
 public:
  static SplitPattern Literal(std::string literal);
  static SplitPattern Regex(KnownRegex regex);

  // Calls `f` for each non-overlapping match, leftmost first. An empty literal never matches.
  void ForEachMatch(std::string_view text, RangeCallback f) const;

 private:
  std::string literal_;
  std::optional<KnownRegex> regex_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Parses HF's behaviour names ("Removed", "Isolated", ...).
absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name);

// Calls `f` for each non-empty piece of `text`, in order.
void ForEachPiece(std::string_view text, const SplitPattern& pattern, SplitBehavior behavior,
                  bool invert, RangeCallback f);

// The same pieces as a vector.
std::vector<ByteRange> SplitText(std::string_view text, const SplitPattern& pattern,
                                 SplitBehavior behavior, bool invert);

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_SPLIT_H_
