// Backtracking-equivalent matchers for the GPT-2, Llama-3 and Qwen2 pre-tokenizer regexes (see
// known_regex.h). Each function tries the alternatives in the pattern's order at one position;
// the comments give the alternative and how its backtracking resolves. Two facts do most of the
// work: `\s+(?!\S)` matches a whitespace run minus its last character when the run is followed
// by a non-space (and the whole run at the end of the text), and `\s*[\r\n]+` ends just after
// the last \r or \n of the whitespace run.
#include "common/tokenizer/known_regex.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/unicode.h"

namespace scd::tokenizer_internal {
namespace {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

struct Char {
  char32_t cp;
  size_t len;
  CharClass cls;
};

Char At(std::string_view text, size_t pos) {
  const auto byte = static_cast<uint8_t>(text[pos]);
  if (byte < 0x80) {  // ASCII fast path
    CharClass cls = CharClass::kOther;
    if ((byte | 0x20) >= 'a' && (byte | 0x20) <= 'z') {
      cls = CharClass::kLetter;
    } else if (byte >= '0' && byte <= '9') {
      cls = CharClass::kNumber;
    } else if (byte == ' ' || (byte >= '\t' && byte <= '\r')) {
      cls = CharClass::kSpace;
    }
    return {byte, 1, cls};
  }
  const Utf8Char c = DecodeUtf8(text, pos);
  if (!c.valid) return {c.cp, static_cast<size_t>(c.len), CharClass::kOther};
  CharClass cls = CharClass::kOther;
  if (IsLetter(c.cp)) {
    cls = CharClass::kLetter;
  } else if (IsNumber(c.cp)) {
    cls = CharClass::kNumber;
  } else if (IsWhitespace(c.cp)) {
    cls = CharClass::kSpace;
  }
  return {c.cp, static_cast<size_t>(c.len), cls};
}

// End of the maximal run of `cls` characters starting at pos (pos itself when none).
size_t RunEnd(std::string_view text, size_t pos, CharClass cls, size_t max_chars = SIZE_MAX) {
  size_t count = 0;
  while (pos < text.size() && count < max_chars) {
    const Char c = At(text, pos);
    if (c.cls != cls) break;
    pos += c.len;
    ++count;
  }
  return pos;
}

bool IsClass(std::string_view text, size_t pos, CharClass cls) {
  return pos < text.size() && At(text, pos).cls == cls;
}

// 's|'t|'re|'ve|'m|'ll|'d at pos (text[pos] == '\''), optionally ASCII case-insensitive with
// U+017F (long s) matching 's' as Unicode case folding does. Returns the end or pos.
size_t MatchContraction(std::string_view text, size_t pos, bool ignore_case) {
  auto lower = [&](size_t p) -> char32_t {
    if (p >= text.size()) return 0;
    const Utf8Char c = DecodeUtf8(text, p);
    if (!c.valid) return 0;
    if (!ignore_case) return c.cp;
    if (c.cp == 0x17F) return 's';
    return (c.cp >= 'A' && c.cp <= 'Z') ? c.cp + 32 : c.cp;
  };
  const size_t p1 = pos + 1;
  const char32_t a = lower(p1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return p1 + DecodeUtf8(text, p1).len;
  if (a == 'r' || a == 'v' || a == 'l') {
    const size_t p2 = p1 + 1;  // 'r', 'v', 'l' (and their upper cases) are one byte
    const char32_t b = lower(p2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return p2 + 1;
  }
  return pos;
}

// \s+(?!\S)|\s+ at a whitespace character.
size_t MatchTrailingSpace(std::string_view text, size_t pos) {
  size_t end = pos;
  size_t last_start = pos;
  int count = 0;
  while (end < text.size()) {
    const Char c = At(text, end);
    if (c.cls != CharClass::kSpace) break;
    last_start = end;
    end += c.len;
    ++count;
  }
  if (end == text.size() || count == 1) return end;
  return last_start;  // leave the last space to prefix the next word
}

size_t MatchGpt2(std::string_view text, size_t pos) {
  const Char c = At(text, pos);
  if (c.cp == '\'') {
    const size_t end = MatchContraction(text, pos, /*ignore_case=*/false);
    if (end != pos) return end;
  }
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the optional space is taken only when the
  // class run follows it; otherwise the run must start at pos.
  for (CharClass cls : {CharClass::kLetter, CharClass::kNumber, CharClass::kOther}) {
    if (c.cp == ' ' && IsClass(text, pos + 1, cls)) return RunEnd(text, pos + 1, cls);
    if (c.cls == cls) return RunEnd(text, pos, cls);
  }
  return MatchTrailingSpace(text, pos);  // c is whitespace
}

size_t MatchLlama3(std::string_view text, size_t pos, size_t max_digits) {
  const Char c = At(text, pos);
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c.cp == '\'') {
    const size_t end = MatchContraction(text, pos, /*ignore_case=*/true);
    if (end != pos) return end;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  const bool prefix_ok =
      c.cp != '\r' && c.cp != '\n' && c.cls != CharClass::kLetter && c.cls != CharClass::kNumber;
  if (prefix_ok && IsClass(text, pos + c.len, CharClass::kLetter)) {
    return RunEnd(text, pos + c.len, CharClass::kLetter);
  }
  if (c.cls == CharClass::kLetter) return RunEnd(text, pos, CharClass::kLetter);
  // \p{N}{1,3} (or \p{N})
  if (c.cls == CharClass::kNumber) return RunEnd(text, pos, CharClass::kNumber, max_digits);
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t other = SIZE_MAX;
  if (c.cp == ' ' && IsClass(text, pos + 1, CharClass::kOther)) {
    other = pos + 1;
  } else if (c.cls == CharClass::kOther) {
    other = pos;
  }
  if (other != SIZE_MAX) {
    size_t end = RunEnd(text, other, CharClass::kOther);
    while (end < text.size() && (text[end] == '\r' || text[end] == '\n')) ++end;
    return end;
  }
  // c is whitespace. \s*[\r\n]+ ends after the run's last \r or \n.
  size_t end = pos;
  size_t after_newline = SIZE_MAX;
  while (end < text.size()) {
    const Char s = At(text, end);
    if (s.cls != CharClass::kSpace) break;
    end += s.len;
    if (s.cp == '\r' || s.cp == '\n') after_newline = end;
  }
  if (after_newline != SIZE_MAX) return after_newline;
  return MatchTrailingSpace(text, pos);
}

}  // namespace

absl::StatusOr<KnownRegex> RecognizeRegex(std::string_view pattern) {
  if (pattern == kGpt2Pattern) return KnownRegex::kGpt2;
  if (pattern == kLlama3Pattern) return KnownRegex::kLlama3;
  if (pattern == kQwen2Pattern) return KnownRegex::kQwen2;
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported pre-tokenizer regex (only the GPT-2, Llama-3 and Qwen2 patterns "
                   "are implemented): ",
                   absl::string_view(pattern.data(), pattern.size())));
}

size_t MatchKnownRegex(KnownRegex regex, std::string_view text, size_t pos) {
  switch (regex) {
    case KnownRegex::kGpt2:
      return MatchGpt2(text, pos);
    case KnownRegex::kLlama3:
      return MatchLlama3(text, pos, 3);
    case KnownRegex::kQwen2:
      return MatchLlama3(text, pos, 1);
  }
  return pos;
}

}  // namespace scd::tokenizer_internal
