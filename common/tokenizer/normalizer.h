// The tokenizer.json "normalizer": a chain of text rewrites applied to each stretch of input
// between added tokens before pre-tokenization. Supported: Sequence, Prepend (SentencePiece's
// "▁" prefix; never prepends to an empty string, as in HF), Replace with a literal pattern
// (" " -> "▁"), NFC (Qwen2) and Strip. Anything else is an error that names the type.
#ifndef SCD_COMMON_TOKENIZER_NORMALIZER_H_
#define SCD_COMMON_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/json_fields.h"

namespace scd::tokenizer_internal {

class Normalizer {
 public:
  // `json` is the "normalizer" object; `path` names it in errors.
  static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(const Json& json,
                                                              std::string_view path);

  std::string Normalize(std::string_view text) const;

 private:
  enum class Kind { kPrepend, kReplace, kNfc, kStrip };
  struct Step {
    Kind kind;
    std::string pattern;  // kPrepend: the prefix; kReplace: the literal to find
    std::string content;  // kReplace: the replacement
    bool strip_left = false;
    bool strip_right = false;
  };

  absl::Status Add(const Json& json, std::string_view path);

  std::vector<Step> steps_;
};

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_NORMALIZER_H_
