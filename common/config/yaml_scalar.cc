// YAML scalars: see yaml_scalar.h. Numbers are converted with std::from_chars, which is
// locale-independent and reports overflow instead of saturating.
#include "common/config/yaml_scalar.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/utf8.h"
#include "common/config/string_view_bridge.h"

namespace scd::config {
namespace {

using nlohmann::json;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool AllOf(std::string_view s, bool (*pred)(char)) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}

bool IsOctalDigit(char c) { return c >= '0' && c <= '7'; }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

int HexValue(char c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

// Reads exactly `digits` hex digits at text[*pos]; false when there are fewer.
bool ReadHex(std::string_view text, size_t* pos, int digits, uint32_t* value) {
  if (text.size() - *pos < static_cast<size_t>(digits)) return false;
  uint32_t v = 0;
  for (int k = 0; k < digits; ++k) {
    const char c = text[*pos + k];
    if (!IsHexDigit(c)) return false;
    v = v * 16 + static_cast<uint32_t>(HexValue(c));
  }
  *pos += digits;
  *value = v;
  return true;
}

// The YAML 1.2 core-schema float pattern without sign and without .inf/.nan:
// (\.[0-9]+ | [0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsCoreFloat(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  if (i < n && s[i] == '.') {
    ++i;
    if (i >= n || !IsDigit(s[i])) return false;
    while (i < n && IsDigit(s[i])) ++i;
  } else {
    if (i >= n || !IsDigit(s[i])) return false;
    while (i < n && IsDigit(s[i])) ++i;
    if (i < n && s[i] == '.') {
      ++i;
      while (i < n && IsDigit(s[i])) ++i;
    }
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '+' || s[i] == '-')) ++i;
    if (i >= n || !IsDigit(s[i])) return false;
    while (i < n && IsDigit(s[i])) ++i;
  }
  return i == n;
}

absl::StatusOr<json> ParseUnsignedWithBase(std::string_view text, std::string_view digits,
                                           int base) {
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  if (ec != std::errc() || ptr != digits.data() + digits.size() ||
      value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("integer ", Excerpt(text), " does not fit in 64 bits"));
  }
  return json(static_cast<int64_t>(value));
}

}  // namespace

absl::Status ParseQuotedScalar(std::string_view text, size_t* pos, std::string* out) {
  out->clear();
  const char quote = text[*pos];
  size_t i = *pos + 1;
  if (quote == '\'') {
    while (i < text.size()) {
      if (text[i] == '\'') {
        if (i + 1 < text.size() && text[i + 1] == '\'') {
          out->push_back('\'');
          i += 2;
          continue;
        }
        *pos = i + 1;
        return absl::OkStatus();
      }
      out->push_back(text[i++]);
    }
    return absl::InvalidArgumentError(
        "unterminated single-quoted string (a quoted string must end on the line it starts)");
  }
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {
      *pos = i + 1;
      return absl::OkStatus();
    }
    if (c != '\\') {
      out->push_back(c);
      ++i;
      continue;
    }
    if (i + 1 >= text.size()) break;
    const char e = text[i + 1];
    i += 2;
    uint32_t cp = 0;
    switch (e) {
      case '0':
        out->push_back('\0');
        break;
      case 'a':
        out->push_back('\a');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 't':
        out->push_back('\t');
        break;
      case '\t':
        out->push_back('\t');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'v':
        out->push_back('\v');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 'e':
        out->push_back('\x1b');
        break;
      case ' ':
        out->push_back(' ');
        break;
      case '"':
        out->push_back('"');
        break;
      case '/':
        out->push_back('/');
        break;
      case '\\':
        out->push_back('\\');
        break;
      case 'x':
        if (!ReadHex(text, &i, 2, &cp)) {
          return absl::InvalidArgumentError("invalid \\x escape (expected 2 hex digits)");
        }
        utf8::AppendUtf8(cp, out);
        break;
      case 'u':
        if (!ReadHex(text, &i, 4, &cp)) {
          return absl::InvalidArgumentError("invalid \\u escape (expected 4 hex digits)");
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return absl::InvalidArgumentError(
              absl::StrFormat("invalid \\u escape: unpaired low surrogate U+%04X", cp));
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          uint32_t low = 0;
          size_t j = i + 2;
          if (text.substr(i, 2) != "\\u" || !ReadHex(text, &j, 4, &low) || low < 0xDC00 ||
              low > 0xDFFF) {
            return absl::InvalidArgumentError(
                absl::StrFormat("invalid \\u escape: unpaired high surrogate U+%04X", cp));
          }
          i = j;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        utf8::AppendUtf8(cp, out);
        break;
      case 'U':
        if (!ReadHex(text, &i, 8, &cp) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          return absl::InvalidArgumentError(
              "invalid \\U escape (expected 8 hex digits naming a Unicode scalar value)");
        }
        utf8::AppendUtf8(cp, out);
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("invalid escape '\\", absl::CHexEscape(absl::string_view(&e, 1)),
                         "' in double-quoted string (use \\\\ for a backslash)"));
    }
  }
  return absl::InvalidArgumentError(
      "unterminated double-quoted string (a quoted string must end on the line it starts)");
}

absl::StatusOr<json> TypePlainScalar(std::string_view text) {
  if (text == "~" || text == "null" || text == "Null" || text == "NULL") return json(nullptr);
  if (text == "true" || text == "True" || text == "TRUE") return json(true);
  if (text == "false" || text == "False" || text == "FALSE") return json(false);

  const bool has_sign = !text.empty() && (text[0] == '+' || text[0] == '-');
  const bool negative = has_sign && text[0] == '-';
  const std::string_view body = has_sign ? text.substr(1) : text;

  if (AllOf(body, IsDigit)) {
    // from_chars accepts a leading '-' but not '+'.
    const std::string_view digits = negative ? text : body;
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("integer ", Excerpt(text), " does not fit in 64 bits"));
    }
    return json(value);
  }
  if (text.size() > 2 && text[0] == '0' && text[1] == 'o' && AllOf(text.substr(2), IsOctalDigit)) {
    return ParseUnsignedWithBase(text, text.substr(2), 8);
  }
  if (text.size() > 2 && text[0] == '0' && text[1] == 'x' && AllOf(text.substr(2), IsHexDigit)) {
    return ParseUnsignedWithBase(text, text.substr(2), 16);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    const double inf = std::numeric_limits<double>::infinity();
    return json(negative ? -inf : inf);
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    return json(std::numeric_limits<double>::quiet_NaN());
  }
  if (IsCoreFloat(body)) {
    const std::string_view number = negative ? text : body;
    double value = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc() || ptr != number.data() + number.size() || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("number ", Excerpt(text), " is out of the range of a double"));
    }
    return json(value);
  }
  return json(std::string(text));
}

std::string Excerpt(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back off to the start of a UTF-8 sequence so the excerpt stays valid UTF-8.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(Sv(text.substr(0, cut)), "...");
}

}  // namespace scd::config
