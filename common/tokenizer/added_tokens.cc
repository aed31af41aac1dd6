// Added-token extraction (HF tokenizer/added_vocabulary.rs, find_matches): scan left to
// right; at the first position where some token matches take the longest; a single_word token
// is skipped unless the characters on both sides are not word characters (regex \w); lstrip widens
// the match over the whitespace before it (never into the previous match), rstrip over the
// whitespace after it. Text between matches becomes model segments.
#include "common/tokenizer/added_tokens.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/unicode.h"

namespace scd::tokenizer_internal {
namespace {

// Start of the character that ends at `end` (end > 0).
size_t PrevCharStart(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) {
    --start;
  }
  const Utf8Char c = DecodeUtf8(text, start);
  return (c.valid && start + c.len == end) ? start : end - 1;
}

bool CharBeforeIsWord(std::string_view text, size_t pos) {
  if (pos == 0) return false;
  const Utf8Char c = DecodeUtf8(text, PrevCharStart(text, pos));
  return c.valid && IsWordChar(c.cp);
}

bool CharAtIsWord(std::string_view text, size_t pos) {
  if (pos >= text.size()) return false;
  const Utf8Char c = DecodeUtf8(text, pos);
  return c.valid && IsWordChar(c.cp);
}

}  // namespace

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const Json* json, std::string_view path) {
  std::vector<AddedToken> tokens;
  if (json == nullptr) return tokens;
  if (!json->is_array()) return JsonError(path, "expected an array");
  for (size_t i = 0; i < json->size(); ++i) {
    const Json& item = (*json)[i];
    const std::string item_path = absl::StrCat(Sv(path), "[", i, "]");
    if (!item.is_object()) return JsonError(item_path, "expected an object");
    AddedToken t;
    SCD_ASSIGN_OR_RETURN(const int64_t id, GetInt(item, "id", item_path));
    if (id < 0 || id > (1 << 24) - 1) {
      return JsonError(JoinPath(item_path, "id"), absl::StrCat("id out of range: ", id));
    }
    t.id = static_cast<int32_t>(id);
    SCD_ASSIGN_OR_RETURN(t.content, GetString(item, "content", item_path));
    if (t.content.empty()) return JsonError(JoinPath(item_path, "content"), "empty token");
    SCD_ASSIGN_OR_RETURN(t.single_word, GetBoolOr(item, "single_word", false, item_path));
    SCD_ASSIGN_OR_RETURN(t.lstrip, GetBoolOr(item, "lstrip", false, item_path));
    SCD_ASSIGN_OR_RETURN(t.rstrip, GetBoolOr(item, "rstrip", false, item_path));
    SCD_ASSIGN_OR_RETURN(t.special, GetBoolOr(item, "special", false, item_path));
    SCD_ASSIGN_OR_RETURN(t.normalized, GetBoolOr(item, "normalized", !t.special, item_path));
    tokens.push_back(std::move(t));
  }
  return tokens;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_id_[tokens_[i].id] = i;  // unique: see ResolveAddedTokenIds in hf_tokenizer.cc
    by_content_[tokens_[i].content] = i;
  }
  for (AddedToken& t : tokens_) {
    if (!t.normalized) {
      t.decoded = t.content;
      raw_.Add(t.content, t);
    } else {
      t.decoded = normalizer != nullptr ? normalizer->Normalize(t.content) : t.content;
      if (!t.decoded.empty()) normalized_.Add(t.decoded, t);
    }
  }
  raw_.Finish();
  normalized_.Finish();
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindByContent(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::Matcher::Add(std::string pattern, const AddedToken& token) {
  const auto first = static_cast<uint8_t>(pattern[0]);
  by_first_byte_[first].push_back({std::move(pattern), token});
  empty_ = false;
}

void AddedVocabulary::Matcher::Finish() {
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) {
      return a.pattern.size() > b.pattern.size();
    });
  }
}

std::vector<TextSegment> AddedVocabulary::Matcher::Split(std::string_view text) const {
  std::vector<TextSegment> segments;
  size_t done = 0;  // end of the last emitted segment
  for (size_t pos = 0; !empty_ && pos < text.size();) {
    const Entry* hit = nullptr;
    for (const Entry& e : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      if (text.compare(pos, e.pattern.size(), e.pattern) == 0) {
        hit = &e;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = pos + hit->pattern.size();
    const AddedToken& token = hit->token;
    if (token.single_word && (CharBeforeIsWord(text, start) || CharAtIsWord(text, stop))) {
      pos = stop;  // HF's match iterator resumes after the rejected match
      continue;
    }
    if (token.lstrip) {
      while (start > done) {
        const size_t prev = PrevCharStart(text, start);
        const Utf8Char c = DecodeUtf8(text, prev);
        if (!c.valid || !IsWhitespace(c.cp)) break;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        const Utf8Char c = DecodeUtf8(text, stop);
        if (!c.valid || !IsWhitespace(c.cp)) break;
        stop += c.len;
      }
    }
    if (start > done) segments.push_back({done, start, -1});
    segments.push_back({start, stop, token.id});
    done = stop;
    pos = stop;
  }
  if (done < text.size()) segments.push_back({done, text.size(), -1});
  return segments;
}

}  // namespace scd::tokenizer_internal
