// Hand-coded matchers for the pre-tokenizer regexes that real tokenizer.json files use. The
// C++ standard library's regex has no \p{L}/\p{N} classes and no Unicode mode, so instead of a
// general engine we recognise the exact pattern strings and match them with code that follows
// the backtracking semantics of the original (Oniguruma, leftmost-first alternation):
//   kGpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//            (also what ByteLevel(use_regex=true) uses)
//   kLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2:  as kLlama3 with \p{N} in place of \p{N}{1,3}.
// An unrecognised pattern is an error that names it. Ill-formed UTF-8 in the input is matched
// as one punctuation-like character per maximal subpart (the original engines reject such
// input outright).
#ifndef SCD_COMMON_TOKENIZER_KNOWN_REGEX_H_
#define SCD_COMMON_TOKENIZER_KNOWN_REGEX_H_

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"

namespace scd::tokenizer_internal {

enum class KnownRegex { kGpt2, kLlama3, kQwen2 };

inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The matcher for `pattern`, or InvalidArgumentError naming the unsupported pattern.
absl::StatusOr<KnownRegex> RecognizeRegex(std::string_view pattern);

// End offset of the match that starts exactly at `pos` (pos < text.size()), or `pos` when no
// alternative matches there. These patterns never match the empty string.
size_t MatchKnownRegex(KnownRegex regex, std::string_view text, size_t pos);

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_KNOWN_REGEX_H_
