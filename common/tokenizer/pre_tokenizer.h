// The tokenizer.json "pre_tokenizer": splits normalized text into words that BPE merges never
// cross. Supported: Sequence, Split (literal or a recognised regex, see known_regex.h),
// ByteLevel (GPT-2's regex plus the bytes_to_unicode mapping), Metaspace (SentencePiece's
// "▁" handling, in both the prepend_scheme and the legacy add_prefix_space form). Anything
// else is an error that names the type.
#ifndef SCD_COMMON_TOKENIZER_PRE_TOKENIZER_H_
#define SCD_COMMON_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/json_fields.h"
#include "common/tokenizer/split.h"

namespace scd::tokenizer_internal {

// Metaspace's rule for adding the replacement character in front of a piece.
enum class PrependScheme { kAlways, kFirst, kNever };

// Parses "prepend_scheme" (or the legacy "add_prefix_space") of a Metaspace object.
absl::StatusOr<PrependScheme> ParsePrependScheme(const Json& json, std::string_view path);

class PreTokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const Json& json,
                                                                std::string_view path);

  // Calls `f` with each word of `piece`, in order. `at_start` says the piece begins at
  // offset 0 of the original input (Metaspace's "first" scheme prepends only there).
  void Split(std::string_view piece, bool at_start,
             absl::FunctionRef<void(std::string_view word)> f) const;

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  struct Step {
    Kind kind;
    SplitPattern pattern;  // kSplit; kMetaspace: the replacement; kByteLevel: GPT-2 regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    bool use_regex = true;          // kByteLevel; kMetaspace: whether to split
    std::string replacement;        // kMetaspace, UTF-8
    PrependScheme prepend_scheme = PrependScheme::kAlways;
  };
  absl::Status Add(const Json& json, std::string_view path);
  // Runs steps_[step...] on one piece, depth first, so no list of pieces is materialised.
  void Run(size_t step, std::string_view piece, bool at_start,
           absl::FunctionRef<void(std::string_view word)> f) const;

  std::vector<Step> steps_;
};

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_PRE_TOKENIZER_H_
