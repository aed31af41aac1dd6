// The YAML-subset parser (see yaml_subset.h). Two layers:
//   - BlockParser splits the text into content lines (indent, text, line number), drops blank
//     and comment lines, and builds mappings and sequences from indentation. A sequence entry
//     `- rest` is rewritten in place into a line holding `rest` at the column where `rest`
//     starts, which is exactly YAML's compact notation: `- a: 1` followed by `  b: 2` is a
//     mapping at column 2.
//   - InlineParser reads what follows `key: ` or `- ` on one line: a plain or quoted scalar or
//     a flow collection.
// Every nested call passes depth + 1 and containers check it against kMaxConfigDepth, so the
// recursion is bounded; every loop consumes at least one line or byte, so parsing terminates.
#include "common/config/yaml_subset.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/base/utf8.h"
#include "common/config/config_file.h"
#include "common/config/string_view_bridge.h"
#include "common/config/yaml_scalar.h"

namespace scd::config {
namespace {

using nlohmann::json;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::string_view TrimLeft(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && IsBlank(s[i])) ++i;
  return s.substr(i);
}

std::string_view TrimRight(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && IsBlank(s[n - 1])) --n;
  return s.substr(0, n);
}

bool IsFlowIndicator(char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; }

// `- item` or a lone `-`.
bool IsSequenceEntry(std::string_view content) {
  return !content.empty() && content[0] == '-' && (content.size() == 1 || IsBlank(content[1]));
}

// The error message for a plain scalar that may not start with s[0], or "" when it may.
std::string PlainStartError(std::string_view s, bool flow) {
  const char c = s[0];
  const bool then_blank = s.size() == 1 || IsBlank(s[1]) || (flow && IsFlowIndicator(s[1]));
  switch (c) {
    case '&':
      return "unsupported YAML feature: anchor ('&')";
    case '*':
      return "unsupported YAML feature: alias ('*')";
    case '!':
      return "unsupported YAML feature: tag ('!')";
    case '|':
    case '>':
      return absl::StrCat("unsupported YAML feature: block scalar ('", absl::string_view(&c, 1),
                          "'); write the value on one line, quoted if needed");
    case '%':
    case '@':
    case '`':
      return absl::StrCat("a plain value cannot start with '", absl::string_view(&c, 1),
                          "'; quote it");
    case '#':
      return flow ? "comment inside a flow collection (a flow collection must end on the line "
                    "it starts)"
                  : "";
    case ',':
    case '[':
    case ']':
    case '{':
    case '}':
      return absl::StrCat("unexpected '", absl::string_view(&c, 1), "'; quote the value");
    case '?':
      return then_blank ? "unsupported YAML feature: complex mapping key ('? ')" : "";
    case '-':
      return then_blank ? "a sequence entry ('- ') is not allowed here" : "";
    case ':':
      return then_blank ? "unexpected ':' (missing key?)" : "";
    default:
      return "";
  }
}

// Reads scalars and flow collections from one line of text.
class InlineParser {
 public:
  // `line` 0 means the text has no line (a command-line value): errors carry no location.
  InlineParser(std::string_view text, std::string_view source, int line)
      : text_(text), source_(source), line_(line) {}

  absl::Status Fail(std::string_view message) const {
    if (line_ == 0) return absl::InvalidArgumentError(Sv(message));
    if (source_.empty())
      return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", Sv(message)));
    return absl::InvalidArgumentError(absl::StrCat(Sv(source_), ":", line_, ": ", Sv(message)));
  }

  // A value in block context (after `key: ` or `- `, or alone on its line); the text must be
  // left-trimmed, non-empty and not a comment. The rest of the line may only be a comment.
  absl::Status ParseBlockValue(int depth, json* out) {
    if (text_.empty()) {
      *out = nullptr;
      return absl::OkStatus();
    }
    const char c = text_[0];
    if (c == '[' || c == '{') {
      SCD_RETURN_IF_ERROR(ParseFlowCollection(depth, out));
      return ExpectEnd("a flow collection", /*allow_comment=*/true);
    }
    if (c == '"' || c == '\'') {
      std::string value;
      SCD_RETURN_IF_ERROR(ParseQuoted(&value));
      *out = std::move(value);
      return ExpectEnd("a quoted string", /*allow_comment=*/true);
    }
    if (std::string error = PlainStartError(text_, /*flow=*/false); !error.empty()) {
      return Fail(error);
    }
    size_t end = text_.size();
    for (size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] == '#' && i > 0 && IsBlank(text_[i - 1])) {
        end = i;
        break;
      }
      if (text_[i] == ':' && (i + 1 == text_.size() || IsBlank(text_[i + 1]))) {
        return Fail(
            "mapping values are not allowed here (a nested mapping goes on the next lines; "
            "quote the value if ':' is part of it)");
      }
    }
    return TypePlain(TrimRight(text_.substr(0, end)), out);
  }

  // A flow collection starting at the current position ('[' or '{').
  absl::Status ParseFlowCollection(int depth, json* out) {
    if (depth > kMaxConfigDepth) return Fail(DepthMessage());
    const bool is_map = text_[pos_] == '{';
    const char close = is_map ? '}' : ']';
    const char* what = is_map ? "flow mapping" : "flow sequence";
    ++pos_;
    *out = is_map ? json::object() : json::array();
    while (true) {
      SkipBlanks();
      if (pos_ >= text_.size()) return Unterminated(what);
      if (text_[pos_] == close) {
        ++pos_;
        return absl::OkStatus();
      }
      if (text_[pos_] == ',') return Fail(absl::StrCat("empty entry in ", what));
      json value;
      if (is_map) {
        std::string key;
        SCD_RETURN_IF_ERROR(ParseFlowKey(&key));
        SkipBlanks();
        if (pos_ >= text_.size() || text_[pos_] != ':') {
          return Fail(absl::StrCat("expected ':' after key '", Excerpt(key),
                                   "' in flow mapping (write 'key: value', with a space)"));
        }
        ++pos_;
        SkipBlanks();
        if (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}') {
          SCD_RETURN_IF_ERROR(ParseFlowNode(depth + 1, &value));
        }
        if (out->contains(key)) return Fail(absl::StrCat("duplicate key '", Excerpt(key), "'"));
        (*out)[key] = std::move(value);
      } else {
        SCD_RETURN_IF_ERROR(ParseFlowNode(depth + 1, &value));
        out->push_back(std::move(value));
      }
      SkipBlanks();
      if (pos_ >= text_.size()) return Unterminated(what);
      if (text_[pos_] == ',') {
        ++pos_;
      } else if (text_[pos_] != close) {
        return Fail(absl::StrCat("expected ',' or '", absl::string_view(&close, 1), "' in ", what,
                                 ", found '", Excerpt(text_.substr(pos_), 20), "'"));
      }
    }
  }

  // A quoted scalar at the current position.
  absl::Status ParseQuoted(std::string* out) {
    absl::Status status = ParseQuotedScalar(text_, &pos_, out);
    return status.ok() ? status : Fail(Sv(status.message()));
  }

  // Succeeds when only blanks (and, if allowed, a comment after a blank) remain.
  absl::Status ExpectEnd(std::string_view after, bool allow_comment) {
    const size_t start = pos_;
    SkipBlanks();
    if (pos_ >= text_.size()) return absl::OkStatus();
    if (allow_comment && text_[pos_] == '#' && pos_ > start) return absl::OkStatus();
    return Fail(absl::StrCat("unexpected characters after ", Sv(after), ": '",
                             Excerpt(text_.substr(pos_), 20), "'"));
  }

 private:
  absl::Status ParseFlowNode(int depth, json* out) {
    if (text_[pos_] == '[' || text_[pos_] == '{') return ParseFlowCollection(depth, out);
    if (text_[pos_] == '"' || text_[pos_] == '\'') {
      std::string value;
      SCD_RETURN_IF_ERROR(ParseQuoted(&value));
      *out = std::move(value);
      return absl::OkStatus();
    }
    std::string_view plain;
    SCD_RETURN_IF_ERROR(ScanFlowPlain(&plain));
    return TypePlain(plain, out);
  }

  absl::Status ParseFlowKey(std::string* key) {
    if (text_[pos_] == '"' || text_[pos_] == '\'') return ParseQuoted(key);
    if (text_[pos_] == '[' || text_[pos_] == '{') {
      return Fail("unsupported YAML feature: a collection as a mapping key");
    }
    std::string_view plain;
    SCD_RETURN_IF_ERROR(ScanFlowPlain(&plain));
    *key = std::string(plain);
    return absl::OkStatus();
  }

  // A plain scalar inside a flow collection: ends at a flow indicator, at ': ' (or ':' before
  // an indicator or the end) and at a comment.
  absl::Status ScanFlowPlain(std::string_view* out) {
    const std::string_view rest = text_.substr(pos_);
    if (std::string error = PlainStartError(rest, /*flow=*/true); !error.empty()) {
      return Fail(error);
    }
    size_t i = pos_;
    while (i < text_.size()) {
      const char c = text_[i];
      if (IsFlowIndicator(c)) break;
      if (c == ':' &&
          (i + 1 == text_.size() || IsBlank(text_[i + 1]) || IsFlowIndicator(text_[i + 1]))) {
        break;
      }
      if (c == '#' && i > pos_ && IsBlank(text_[i - 1])) break;
      ++i;
    }
    *out = TrimRight(text_.substr(pos_, i - pos_));
    pos_ = i;
    if (out->empty()) return Fail("expected a value");
    return absl::OkStatus();
  }

  absl::Status TypePlain(std::string_view plain, json* out) const {
    absl::StatusOr<json> value = TypePlainScalar(plain);
    if (!value.ok()) return Fail(Sv(value.status().message()));
    *out = std::move(value).value();
    return absl::OkStatus();
  }

  absl::Status Unterminated(std::string_view what) const {
    return Fail(absl::StrCat("unterminated ", Sv(what),
                             " (a flow collection must end on the line it starts)"));
  }

  static std::string DepthMessage() {
    return absl::StrCat("nesting deeper than ", kMaxConfigDepth, " levels");
  }

  void SkipBlanks() {
    while (pos_ < text_.size() && IsBlank(text_[pos_])) ++pos_;
  }

  std::string_view text_;
  std::string_view source_;
  int line_;
  size_t pos_ = 0;
};

struct Line {
  int number = 0;
  size_t indent = 0;         // column of the first content byte
  std::string_view content;  // from that byte to the end of the line, right-trimmed
};

// What a line's leading `key:` parsed to.
struct KeyMatch {
  bool is_entry = false;  // the line is `key: ...`
  std::string key;
  std::string_view rest;  // after the ':', left-trimmed (may be empty or a comment)
};

class BlockParser {
 public:
  BlockParser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  absl::StatusOr<json> Parse() {
    SCD_RETURN_IF_ERROR(SplitLines());
    if (lines_.empty()) return json::object();
    json root;
    SCD_RETURN_IF_ERROR(ParseNode(lines_[0].indent, 1, &root));
    if (!root.is_object()) {
      return Error(lines_[0].number, "the top level must be a mapping of 'key: value' lines");
    }
    if (pos_ < lines_.size()) {
      return Error(lines_[pos_].number,
                   "bad indentation: this line lines up with no enclosing block");
    }
    return root;
  }

 private:
  absl::Status Error(int line, std::string_view message) const {
    return InlineParser(std::string_view(), source_, line).Fail(message);
  }

  int LineOf(size_t offset) const {
    int line = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) line += text_[i] == '\n';
    return line;
  }

  absl::Status SplitLines() {
    std::string_view text = text_;
    size_t base = 0;
    if (text.substr(0, 3) == "\xEF\xBB\xBF") base = 3;
    if (const size_t bad = utf8::FindInvalidUtf8(text); bad != std::string_view::npos) {
      return Error(LineOf(bad), absl::StrFormat("invalid UTF-8 (byte 0x%02X)",
                                                static_cast<unsigned char>(text[bad])));
    }
    for (size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == '\r' && (i + 1 == text.size() || text[i + 1] != '\n')) {
        return Error(LineOf(i), "carriage return without a line feed");
      }
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) {
        return Error(LineOf(i), absl::StrFormat("control character 0x%02X is not allowed", c));
      }
    }
    bool seen_content = false;
    bool seen_document_start = false;
    int number = 0;
    size_t start = base;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      std::string_view raw = text.substr(start, end - start);
      start = end + 1;
      ++number;
      if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
      size_t indent = 0;
      while (indent < raw.size() && raw[indent] == ' ') ++indent;
      const std::string_view content = TrimRight(raw.substr(indent));
      if (content.empty() || content[0] == '#') continue;
      if (content[0] == '\t') {
        const std::string_view rest = TrimLeft(content);
        if (rest.empty() || rest[0] == '#') continue;
        return Error(number, "tab character in indentation (indent with spaces)");
      }
      if (indent == 0) {
        // "---" or "..." alone or followed by a blank (a marker, not a plain "---x").
        const bool marker = content.size() == 3 || (content.size() > 3 && IsBlank(content[3]));
        if (content.substr(0, 3) == "---" && marker) {
          if (seen_content || seen_document_start) {
            return Error(number, "unsupported YAML feature: several documents ('---')");
          }
          seen_document_start = true;
          const std::string_view rest = TrimLeft(content.substr(3));
          if (!rest.empty() && rest[0] != '#') {
            return Error(number, "unsupported YAML feature: content on the '---' line");
          }
          continue;
        }
        if (content.substr(0, 3) == "..." && marker) {
          return Error(number, "unsupported YAML feature: document end marker ('...')");
        }
        if (content[0] == '%') return Error(number, "unsupported YAML feature: directive ('%')");
      }
      seen_content = true;
      lines_.push_back(Line{number, indent, content});
    }
    return absl::OkStatus();
  }

  // Whether the line starts with `key:`; errors for keys that cannot be parsed.
  absl::Status MatchKey(const Line& line, KeyMatch* match) const {
    const std::string_view c = line.content;
    match->is_entry = false;
    if (c[0] == '"' || c[0] == '\'') {
      size_t pos = 0;
      std::string key;
      if (absl::Status s = ParseQuotedScalar(c, &pos, &key); !s.ok()) {
        return Error(line.number, Sv(s.message()));
      }
      while (pos < c.size() && IsBlank(c[pos])) ++pos;
      if (pos < c.size() && c[pos] == ':' && (pos + 1 == c.size() || IsBlank(c[pos + 1]))) {
        match->is_entry = true;
        match->key = std::move(key);
        match->rest = TrimLeft(c.substr(pos + 1));
      }
      return absl::OkStatus();
    }
    if (c[0] == '[' || c[0] == '{') return absl::OkStatus();
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i] == '#' && i > 0 && IsBlank(c[i - 1])) break;
      if (c[i] == ':' && (i + 1 == c.size() || IsBlank(c[i + 1]))) {
        const std::string_view key = TrimRight(c.substr(0, i));
        if (key.empty()) return Error(line.number, "missing key before ':'");
        if (std::string error = PlainStartError(key, /*flow=*/false); !error.empty()) {
          return Error(line.number, error);
        }
        match->is_entry = true;
        match->key = std::string(key);
        match->rest = TrimLeft(c.substr(i + 1));
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  // The node whose first line is lines_[pos_], which sits at column `indent`.
  absl::Status ParseNode(size_t indent, int depth, json* out) {
    const Line& line = lines_[pos_];
    if (IsSequenceEntry(line.content)) return ParseSequence(indent, depth, out);
    KeyMatch match;
    SCD_RETURN_IF_ERROR(MatchKey(line, &match));
    if (match.is_entry) return ParseMapping(indent, depth, out);
    ++pos_;
    return InlineParser(line.content, source_, line.number).ParseBlockValue(depth, out);
  }

  absl::Status ParseMapping(size_t indent, int depth, json* out) {
    if (depth > kMaxConfigDepth) return DepthError();
    *out = json::object();
    while (pos_ < lines_.size()) {
      const Line& line = lines_[pos_];
      if (line.indent < indent) break;
      if (line.indent > indent) return BadIndent(line, indent);
      if (IsSequenceEntry(line.content)) {
        return Error(line.number, "expected 'key: value', found a sequence entry ('- ')");
      }
      KeyMatch match;
      SCD_RETURN_IF_ERROR(MatchKey(line, &match));
      if (!match.is_entry) {
        return Error(line.number, absl::StrCat("expected 'key: value', found '",
                                               Excerpt(line.content, 20), "'"));
      }
      if (out->contains(match.key)) {
        return Error(line.number, absl::StrCat("duplicate key '", Excerpt(match.key), "'"));
      }
      ++pos_;
      json value;
      if (match.rest.empty() || match.rest[0] == '#') {
        SCD_RETURN_IF_ERROR(
            ParseIndentedValue(indent, /*allow_same_indent_sequence=*/true, depth + 1, &value));
      } else {
        SCD_RETURN_IF_ERROR(
            InlineParser(match.rest, source_, line.number).ParseBlockValue(depth + 1, &value));
      }
      (*out)[match.key] = std::move(value);
    }
    return absl::OkStatus();
  }

  absl::Status ParseSequence(size_t indent, int depth, json* out) {
    if (depth > kMaxConfigDepth) return DepthError();
    *out = json::array();
    while (pos_ < lines_.size()) {
      Line& line = lines_[pos_];
      if (line.indent > indent) return BadIndent(line, indent);
      if (line.indent < indent || !IsSequenceEntry(line.content)) break;
      const std::string_view rest = TrimLeft(line.content.substr(1));
      json item;
      if (rest.empty() || rest[0] == '#') {
        ++pos_;
        SCD_RETURN_IF_ERROR(
            ParseIndentedValue(indent, /*allow_same_indent_sequence=*/false, depth + 1, &item));
      } else {
        // Compact notation: the entry's content becomes a line of its own at its column.
        line.indent += static_cast<size_t>(rest.data() - line.content.data());
        line.content = rest;
        SCD_RETURN_IF_ERROR(ParseNode(line.indent, depth + 1, &item));
      }
      out->push_back(std::move(item));
    }
    return absl::OkStatus();
  }

  // The value of a `key:` or `-` with nothing after it: the more-indented lines that follow,
  // or (for a key) a sequence at the key's own indentation, or else null.
  absl::Status ParseIndentedValue(size_t parent_indent, bool allow_same_indent_sequence, int depth,
                                  json* out) {
    *out = nullptr;
    if (pos_ >= lines_.size()) return absl::OkStatus();
    const Line& next = lines_[pos_];
    if (next.indent > parent_indent) return ParseNode(next.indent, depth, out);
    if (allow_same_indent_sequence && next.indent == parent_indent &&
        IsSequenceEntry(next.content)) {
      return ParseSequence(parent_indent, depth, out);
    }
    return absl::OkStatus();
  }

  absl::Status BadIndent(const Line& line, size_t expected) const {
    return Error(line.number, absl::StrCat("bad indentation: expected the block's column ",
                                           expected + 1, " or less, found column ", line.indent + 1,
                                           " (multi-line values are not supported)"));
  }

  absl::Status DepthError() const {
    return Error(lines_[pos_].number,
                 absl::StrCat("nesting deeper than ", kMaxConfigDepth, " levels"));
  }

  std::string_view text_;
  std::string_view source_;
  std::vector<Line> lines_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<json> ParseYaml(std::string_view text, std::string_view source_name) {
  return BlockParser(text, source_name).Parse();
}

absl::StatusOr<json> ParseYamlInlineValue(std::string_view text, int depth) {
  if (const size_t bad = utf8::FindInvalidUtf8(text); bad != std::string_view::npos) {
    return absl::InvalidArgumentError("invalid UTF-8");
  }
  const std::string_view value = TrimRight(TrimLeft(text));
  if (value.empty()) return json("");
  InlineParser parser(value, "", 0);
  json out;
  if (value[0] == '[' || value[0] == '{') {
    SCD_RETURN_IF_ERROR(parser.ParseFlowCollection(depth, &out));
    SCD_RETURN_IF_ERROR(parser.ExpectEnd("a flow collection", /*allow_comment=*/false));
    return out;
  }
  if (value[0] == '"' || value[0] == '\'') {
    std::string s;
    SCD_RETURN_IF_ERROR(parser.ParseQuoted(&s));
    SCD_RETURN_IF_ERROR(parser.ExpectEnd("a quoted string", /*allow_comment=*/false));
    return json(std::move(s));
  }
  return TypePlainScalar(value);
}

}  // namespace scd::config
