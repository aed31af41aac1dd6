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

#include "common/base/utf8.h"

namespace scd::tokenizer_internal {

// The decoding and encoding themselves (common/base/utf8.h), by their names here.
using utf8::AppendUtf8;
using utf8::DecodeUtf8;
using utf8::DecodeUtf8Multibyte;
using utf8::IsValidUtf8;
using utf8::kReplacementChar;
using utf8::kReplacementUtf8;
using utf8::Utf8Char;

// Rust's String::from_utf8_lossy: valid characters are kept, each maximal subpart of an
// ill-formed sequence becomes one U+FFFD.
std::string Utf8Lossy(std::string_view bytes);

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
