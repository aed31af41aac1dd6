// UTF-8 and Unicode helpers for the tokenizer: decoding one character with the Unicode
// "maximal subpart" rule for ill-formed bytes (the rule Rust's String::from_utf8_lossy, and so
// Hugging Face tokenizers, use: each maximal subpart of an ill-formed sequence becomes one
// U+FFFD), a streaming lossy decoder built on it, the character classes the pre-tokenizer
// regexes need (\p{L}, \p{N}, \s), and GPT-2's bytes_to_unicode table for byte-level BPE.
#ifndef SCD_COMMON_TOKENIZER_UNICODE_H_
#define SCD_COMMON_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace scd::tokenizer_internal {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// One decoded character. For ill-formed input, `valid` is false, `cp` is kReplacementChar and
// `len` is the length of the maximal subpart (1 to 3 bytes); `truncated` is set when that
// subpart is a valid prefix cut off by the end of the input (more bytes could complete it).
struct Utf8Char {
  char32_t cp;
  int len;
  bool valid;
  bool truncated;
};

Utf8Char DecodeUtf8Multibyte(std::string_view text, size_t pos);

// Decodes the character starting at text[pos]; pos < text.size(). Inline for the ASCII case,
// which dominates every scan in the tokenizer.
inline Utf8Char DecodeUtf8(std::string_view text, size_t pos) {
  const auto b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) return {b, 1, true, false};
  return DecodeUtf8Multibyte(text, pos);
}

void AppendUtf8(char32_t cp, std::string* out);

// Rust's String::from_utf8_lossy: valid characters are kept, each maximal subpart of an
// ill-formed sequence becomes one U+FFFD.
std::string Utf8Lossy(std::string_view bytes);

// True when `bytes` is entirely well-formed UTF-8.
bool IsValidUtf8(std::string_view bytes);

// Streaming form of Utf8Lossy: Push(a) + Push(b) + Flush() == Utf8Lossy(a + b). Output never
// ends inside a character; a truncated tail is held until more bytes or Flush().
class Utf8LossyStream {
 public:
  void Push(std::string_view bytes, std::string* out);
  void Flush(std::string* out);

 private:
  std::string pending_;  // at most 3 bytes: a truncated but so far valid sequence
};

// General category L* (regex \p{L}) and N* (regex \p{N}).
bool IsLetter(char32_t cp);
bool IsNumber(char32_t cp);
// Unicode \w as Rust's regex crate defines it (used by HF for single_word added tokens).
bool IsWordChar(char32_t cp);
// The Unicode White_Space property (regex \s in Unicode mode; Rust's char::is_whitespace).
bool IsWhitespace(char32_t cp);
// Canonical combining class (0 for starters).
int CombiningClass(char32_t cp);

// GPT-2's bytes_to_unicode: byte b maps to a printable code point, returned here as UTF-8.
const std::string& ByteToUnicode(uint8_t b);
// Inverse of ByteToUnicode; -1 when cp is not in the image.
int UnicodeToByte(char32_t cp);

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_UNICODE_H_
