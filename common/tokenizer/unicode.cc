// UTF-8 decoding with the maximal-subpart rule (Unicode 15, section 3.9, table 3-7 lists the
// well-formed byte sequences), Unicode character classes over the generated range tables, and
// GPT-2's bytes_to_unicode map (the printable bytes map to themselves, the other 68 bytes to
// U+0100 upwards in byte order).
#include "common/tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "common/tokenizer/unicode_tables.h"

namespace scd::tokenizer_internal {
namespace {

// Allowed range of the second byte for each lead byte; later bytes are always 80..BF.
struct LeadInfo {
  int len;  // 0: never a lead byte
  uint8_t lo;
  uint8_t hi;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

bool InRanges(const CodepointRange* ranges, size_t n, char32_t cp) {
  const CodepointRange* end = ranges + n;
  const CodepointRange* it = std::upper_bound(
      ranges, end, cp, [](char32_t c, const CodepointRange& r) { return c < r.lo; });
  return it != ranges && cp <= (it - 1)->hi;
}

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> to_byte;  // every image code point is below U+0200
};

const ByteTables& Tables() {
  static const ByteTables* tables = [] {
    auto* t = new ByteTables;
    t->to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : 0x100 + next++;
      AppendUtf8(cp, &t->to_unicode[b]);
      t->to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

Utf8Char DecodeUtf8Multibyte(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b0 = s[pos];
  const LeadInfo lead = Lead(b0);
  if (lead.len == 1) return {b0, 1, true, false};
  if (lead.len == 0) return {kReplacementChar, 1, false, false};
  char32_t cp = b0 & (lead.len == 2 ? 0x1F : lead.len == 3 ? 0x0F : 0x07);
  for (int k = 1; k < lead.len; ++k) {
    if (pos + k >= n) return {kReplacementChar, k, false, true};
    const uint8_t b = s[pos + k];
    const uint8_t lo = k == 1 ? lead.lo : 0x80;
    const uint8_t hi = k == 1 ? lead.hi : 0xBF;
    if (b < lo || b > hi) return {kReplacementChar, k, false, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, lead.len, true, false};
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  Utf8LossyStream stream;
  stream.Push(bytes, &out);
  stream.Flush(&out);
  return out;
}

bool IsValidUtf8(std::string_view bytes) {
  for (size_t pos = 0; pos < bytes.size();) {
    const Utf8Char c = DecodeUtf8(bytes, pos);
    if (!c.valid) return false;
    pos += c.len;
  }
  return true;
}

void Utf8LossyStream::Push(std::string_view bytes, std::string* out) {
  std::string joined;
  if (!pending_.empty()) {
    joined = pending_;
    joined.append(bytes);
    bytes = joined;
    pending_.clear();
  }
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Char c = DecodeUtf8(bytes, pos);
    if (c.truncated) {
      pending_.assign(bytes.substr(pos));
      return;
    }
    if (c.valid) {
      out->append(bytes.substr(pos, c.len));
    } else {
      out->append(kReplacementUtf8);
    }
    pos += c.len;
  }
}

void Utf8LossyStream::Flush(std::string* out) {
  if (!pending_.empty()) out->append(kReplacementUtf8);  // one maximal subpart
  pending_.clear();
}

bool IsLetter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(kLetterRanges, kLetterRangesSize, cp);
}

bool IsNumber(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(kNumberRanges, kNumberRangesSize, cp);
}

bool IsWordChar(char32_t cp) {
  if (cp < 0x80) return cp == '_' || IsLetter(cp) || IsNumber(cp);
  return InRanges(kWordRanges, kWordRangesSize, cp);
}

bool IsWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

int CombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningClassRange* begin = kCombiningClasses;
  const CombiningClassRange* end = begin + kCombiningClassesSize;
  const CombiningClassRange* it = std::upper_bound(
      begin, end, cp, [](char32_t c, const CombiningClassRange& r) { return c < r.lo; });
  if (it == begin || cp > (it - 1)->hi) return 0;
  return (it - 1)->ccc;
}

const std::string& ByteToUnicode(uint8_t b) { return Tables().to_unicode[b]; }

int UnicodeToByte(char32_t cp) { return cp < 512 ? Tables().to_byte[cp] : -1; }

}  // namespace scd::tokenizer_internal
