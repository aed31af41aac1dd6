// The lossy UTF-8 decoder (over common/base/utf8.h's maximal-subpart decoding), Unicode
// character classes over the generated range tables, and GPT-2's bytes_to_unicode map (the
// printable bytes map to themselves, the other 68 bytes to U+0100 upwards in byte order).
#include "common/tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "common/tokenizer/unicode_tables.h"

namespace scd::tokenizer_internal {
namespace {

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

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  Utf8LossyStream stream;
  stream.Push(bytes, &out);
  stream.Flush(&out);
  return out;
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
