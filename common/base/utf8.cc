#include "common/base/utf8.h"

#include <cstdint>

namespace scd::utf8 {
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

size_t FindInvalidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    if (!c.valid) return pos;
    pos += c.len;
  }
  return std::string_view::npos;
}

}  // namespace scd::utf8
