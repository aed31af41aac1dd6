// UTF-8 decoding and encoding, shared by the tokenizer and the config reader. Decoding follows
// the Unicode "maximal subpart" rule for ill-formed bytes (Unicode 15, section 3.9, table 3-7
// lists the well-formed byte sequences): overlong forms, surrogates and code points above
// U+10FFFF are ill-formed, and each maximal subpart of an ill-formed sequence is one error,
// which is what Rust's String::from_utf8_lossy, and so Hugging Face tokenizers, replace with
// one U+FFFD.
#ifndef SCD_COMMON_BASE_UTF8_H_
#define SCD_COMMON_BASE_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace scd::utf8 {

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

// Appends `cp` (at most U+10FFFF, not a surrogate) encoded as UTF-8.
void AppendUtf8(char32_t cp, std::string* out);

// Offset of the first byte of `text` that does not start a well-formed UTF-8 sequence, or npos
// when the whole text is well-formed.
size_t FindInvalidUtf8(std::string_view text);

// True when `bytes` is entirely well-formed UTF-8.
inline bool IsValidUtf8(std::string_view bytes) {
  return FindInvalidUtf8(bytes) == std::string_view::npos;
}

}  // namespace scd::utf8

#endif  // SCD_COMMON_BASE_UTF8_H_
