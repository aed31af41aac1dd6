// UTF-8 decoding and encoding (common/base/utf8.h), shared by the tokenizer and the config
// reader: checked against the definition that a well-formed sequence is exactly the encoding
// of one Unicode scalar value (U+0000..U+10FFFF, surrogates excluded), exhaustively for
// sequences of up to three bytes and for every four-byte sequence's first two bytes.
#include "common/base/utf8.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace scd::utf8 {
namespace {

bool IsScalar(char32_t cp) { return cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF); }

std::string Encoded(char32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

// Independent of the decoder: `bytes` is one well-formed character when it is the encoding of
// the scalar value its bits spell (the shortest form, so no overlong form passes).
bool OneWellFormedCharacter(const std::string& bytes) {
  const auto b0 = static_cast<unsigned char>(bytes[0]);
  const size_t len = b0 < 0x80             ? 1
                     : (b0 & 0xE0) == 0xC0 ? 2
                     : (b0 & 0xF0) == 0xE0 ? 3
                     : (b0 & 0xF8) == 0xF0 ? 4
                                           : 0;
  if (len == 0 || len != bytes.size()) return false;
  char32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  return IsScalar(cp) && Encoded(cp) == bytes;
}

// `bytes` cut into well-formed characters, tried every way.
bool AllWellFormed(const std::string& bytes) {
  std::vector<bool> reach(bytes.size() + 1, false);
  reach[0] = true;
  for (size_t at = 0; at < bytes.size(); ++at) {
    if (!reach[at]) continue;
    for (size_t len = 1; len <= 4 && at + len <= bytes.size(); ++len) {
      if (OneWellFormedCharacter(bytes.substr(at, len))) reach[at + len] = true;
    }
  }
  return reach[bytes.size()];
}

TEST_CASE("AppendUtf8 and DecodeUtf8 round-trip every scalar value", "[cpu]") {
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (!IsScalar(cp)) continue;
    const std::string s = Encoded(cp);
    const size_t want_len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    const Utf8Char c = DecodeUtf8(s, 0);
    if (!(c.valid && c.cp == cp && static_cast<size_t>(c.len) == want_len && s.size() == want_len &&
          IsValidUtf8(s))) {
      FAIL("U+" << std::hex << static_cast<uint32_t>(cp) << " does not round-trip");
    }
  }
}

TEST_CASE("Every sequence of up to three bytes decodes as the scalar values it encodes", "[cpu]") {
  std::string s;
  int64_t valid = 0;
  for (int len = 1; len <= 3; ++len) {
    const uint32_t count = 1u << (8 * len);
    for (uint32_t v = 0; v < count; ++v) {
      s.resize(len);
      for (int i = 0; i < len; ++i) s[i] = static_cast<char>(v >> (8 * (len - 1 - i)));
      const bool want = OneWellFormedCharacter(s);
      const Utf8Char c = DecodeUtf8(s, 0);
      const bool whole = c.valid && c.len == len;
      if (whole != want || IsValidUtf8(s) != AllWellFormed(s)) {
        FAIL("bytes " << std::hex << v << " of length " << len);
      }
      valid += want;
    }
  }
  // 128 one-byte, 1920 two-byte and 61440 three-byte (63488 less 2048 surrogates) characters.
  CHECK(valid == 128 + 1920 + 61440);
}

TEST_CASE("Four-byte sequences are valid from U+10000 to U+10FFFF only", "[cpu]") {
  int64_t valid = 0;
  for (uint32_t lead = 0xF0; lead <= 0xFF; ++lead) {
    for (uint32_t second = 0; second < 256; ++second) {
      const std::string s = {static_cast<char>(lead), static_cast<char>(second), '\x80', '\xBF'};
      const bool want = OneWellFormedCharacter(s);
      const Utf8Char c = DecodeUtf8(s, 0);
      REQUIRE((c.valid && c.len == 4) == want);
      REQUIRE(IsValidUtf8(s) == want);
      valid += want;
    }
  }
  // Leads F0 (second byte 90..BF), F1..F3 (80..BF) and F4 (80..8F).
  CHECK(valid == 48 + 3 * 64 + 16);
}

TEST_CASE("FindInvalidUtf8 names the first ill-formed byte", "[cpu]") {
  CHECK(FindInvalidUtf8("") == std::string_view::npos);
  CHECK(FindInvalidUtf8("plain ascii") == std::string_view::npos);
  CHECK(FindInvalidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == std::string_view::npos);
  CHECK(FindInvalidUtf8("ab\xC0\xAF") == 2);        // overlong '/'
  CHECK(FindInvalidUtf8("a\xED\xA0\x80") == 1);     // surrogate U+D800
  CHECK(FindInvalidUtf8("\xF4\x90\x80\x80") == 0);  // above U+10FFFF
  CHECK(FindInvalidUtf8("ok\xE2\x82") == 2);        // cut off at the end
  CHECK(FindInvalidUtf8("\xC3\xA9\x80") == 2);      // a stray continuation byte
  CHECK(FindInvalidUtf8("\xC3\xA9x\xFF") == 3);     // never a lead byte
  const Utf8Char cut = DecodeUtf8("\xE2\x82", 0);
  CHECK((!cut.valid && cut.truncated && cut.len == 2 && cut.cp == kReplacementChar));
  const Utf8Char bad = DecodeUtf8("\xE2(", 0);
  CHECK((!bad.valid && !bad.truncated && bad.len == 1));
}

}  // namespace
}  // namespace scd::utf8
