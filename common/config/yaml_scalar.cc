// YAML scalars: see yaml_scalar.h. Numbers are converted with std::from_chars, which is
// locale-independent and reports overflow instead of saturating.
#include "common/config/yaml_scalar.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
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

// The character a one-character escape `\e` of a double-quoted scalar stands for; nullopt for
// any other `e`.
std::optional<char> SimpleEscape(char e) {
  switch (e) {
    case '0':
      return '\0';
    case 'a':
      return '\a';
    case 'b':
      return '\b';
    case 't':
    case '\t':
      return '\t';
    case 'n':
      return '\n';
    case 'v':
      return '\v';
    case 'f':
      return '\f';
    case 'r':
      return '\r';
    case 'e':
      return '\x1b';
    case ' ':
    case '"':
    case '/':
    case '\\':
      return e;
    default:
      return std::nullopt;
  }
}

// A \u escape's code point (`cp`, its 4 hex digits read) completed: a high surrogate takes the
// \u escape of its low one at text[*i].
absl::StatusOr<uint32_t> CompleteSurrogatePair(std::string_view text, size_t* i, uint32_t cp) {
  if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid \\u escape: unpaired low surrogate U+%04X", cp));
  }
  if (cp < 0xD800 || cp > 0xDBFF) return cp;
  uint32_t low = 0;
  size_t j = *i + 2;
  if (text.substr(*i, 2) != "\\u" || !ReadHex(text, &j, 4, &low) || low < 0xDC00 || low > 0xDFFF) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid \\u escape: unpaired high surrogate U+%04X", cp));
  }
  *i = j;
  return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
}

// The code point escapes \xHH, \uHHHH (a surrogate pair as two) and \UHHHHHHHH, whose digits
// start at text[*i], appended to *out as UTF-8.
absl::Status AppendCodePointEscape(char e, std::string_view text, size_t* i, std::string* out) {
  uint32_t cp = 0;
  if (e == 'x') {
    if (!ReadHex(text, i, 2, &cp)) {
      return absl::InvalidArgumentError("invalid \\x escape (expected 2 hex digits)");
    }
  } else if (e == 'u') {
    if (!ReadHex(text, i, 4, &cp)) {
      return absl::InvalidArgumentError("invalid \\u escape (expected 4 hex digits)");
    }
    absl::StatusOr<uint32_t> full = CompleteSurrogatePair(text, i, cp);
    if (!full.ok()) return full.status();
    cp = *full;
  } else {
    if (!ReadHex(text, i, 8, &cp) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return absl::InvalidArgumentError(
          "invalid \\U escape (expected 8 hex digits naming a Unicode scalar value)");
    }
  }
  utf8::AppendUtf8(cp, out);
  return absl::OkStatus();
}

// ParseQuotedScalar's two kinds, text[*pos] being the opening quote.
absl::Status ParseSingleQuoted(std::string_view text, size_t* pos, std::string* out) {
  size_t i = *pos + 1;
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

absl::Status ParseDoubleQuoted(std::string_view text, size_t* pos, std::string* out) {
  size_t i = *pos + 1;
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
    if (const std::optional<char> simple = SimpleEscape(e)) {
      out->push_back(*simple);
    } else if (e == 'x' || e == 'u' || e == 'U') {
      if (absl::Status st = AppendCodePointEscape(e, text, &i, out); !st.ok()) return st;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid escape '\\", absl::CHexEscape(absl::string_view(&e, 1)),
                       "' in double-quoted string (use \\\\ for a backslash)"));
    }
  }
  return absl::InvalidArgumentError(
      "unterminated double-quoted string (a quoted string must end on the line it starts)");
}

}  // namespace

absl::Status ParseQuotedScalar(std::string_view text, size_t* pos, std::string* out) {
  out->clear();
  if (text[*pos] == '\'') return ParseSingleQuoted(text, pos, out);
  return ParseDoubleQuoted(text, pos, out);
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
