// The tokenizer.json "added_tokens": strings (special or not) that are cut out of the input
// verbatim before the model sees it, as HF's AddedVocabulary does (ids are resolved the way HF
// re-adds the tokens on load; see hf_tokenizer.cc). Tokens with
// normalized=false are matched in the raw input; tokens with normalized=true are matched in
// the normalized text against their own normalized form. Matching is leftmost-longest (HF
// uses Aho-Corasick with LeftmostLongest), then single_word / lstrip / rstrip are applied.
#ifndef SCD_COMMON_TOKENIZER_ADDED_TOKENS_H_
#define SCD_COMMON_TOKENIZER_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/json_fields.h"

namespace scd::tokenizer_internal {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
  // What decoding emits for this id: the content, or for normalized=true tokens the content
  // after the normalizer (HF's id_to_token returns that form, e.g. "▁b▁a" for "b a").
  std::string decoded;
};

// Parses the "added_tokens" array (absent or null: none).
absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const Json* json, std::string_view path);

// A stretch of text: an added token when id >= 0, otherwise text for the model.
struct TextSegment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) gives the normalized form of normalized=true tokens.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Segments covering `text` in order, cut at the raw (normalized=false) tokens.
  std::vector<TextSegment> SplitRaw(std::string_view text) const { return raw_.Split(text); }
  // Segments covering already-normalized text, cut at the normalized=true tokens.
  std::vector<TextSegment> SplitNormalized(std::string_view text) const {
    return normalized_.Split(text);
  }

  const AddedToken* FindById(int32_t id) const;
  const AddedToken* FindByContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Leftmost-longest literal matcher: candidates bucketed by first byte, longest first.
  class Matcher {
   public:
    void Add(std::string pattern, const AddedToken& token);
    void Finish();
    std::vector<TextSegment> Split(std::string_view text) const;

   private:
    struct Entry {
      std::string pattern;
      AddedToken token;
    };
    std::array<std::vector<Entry>, 256> by_first_byte_;
    bool empty_ = true;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_ADDED_TOKENS_H_
