// Normalizer steps, each a function string -> string applied in order. The HF semantics kept
// here: Prepend is a no-op on "" (so encoding "" yields no "▁" token), Replace substitutes
// every non-overlapping occurrence left to right, Strip removes Unicode White_Space at the
// chosen ends, NFC is full Unicode NFC (unicode_nfc.cc).
#include "common/tokenizer/normalizer.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/unicode.h"
#include "common/tokenizer/unicode_nfc.h"

namespace scd::tokenizer_internal {
namespace {

std::string ReplaceAll(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t m = text.find(pattern); m != std::string_view::npos; m = text.find(pattern, pos)) {
    out.append(text.substr(pos, m - pos));
    out.append(content);
    pos = m + pattern.size();
  }
  out.append(text.substr(pos));
  return out;
}

std::string StripWhitespace(std::string_view text, bool left, bool right) {
  size_t begin = 0;
  size_t end = text.size();
  if (left) {
    while (begin < end) {
      const Utf8Char c = DecodeUtf8(text, begin);
      if (!c.valid || !IsWhitespace(c.cp)) break;
      begin += c.len;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;  // back up to the start of the last character
      while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
      const Utf8Char c = DecodeUtf8(text, start);
      if (!c.valid || start + c.len != end || !IsWhitespace(c.cp)) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const Json& json,
                                                                 std::string_view path) {
  auto normalizer = std::unique_ptr<Normalizer>(new Normalizer);
  SCD_RETURN_IF_ERROR(normalizer->Add(json, path));
  return normalizer;
}

absl::Status Normalizer::Add(const Json& json, std::string_view path) {
  SCD_ASSIGN_OR_RETURN(const std::string type, GetType(json, path));
  if (type == "Sequence") {
    return ForEachInSequence(
        json, "normalizers", path,
        [this](const Json& item, std::string_view item_path) { return Add(item, item_path); });
  }
  Step step;
  if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    SCD_ASSIGN_OR_RETURN(step.pattern, GetString(json, "prepend", path));
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    bool is_regex = false;
    SCD_ASSIGN_OR_RETURN(step.pattern, GetPattern(json, "pattern", path, &is_regex));
    if (is_regex) {
      return JsonError(JoinPath(path, "pattern"),
                       absl::StrCat("unsupported Replace regex: ", step.pattern));
    }
    if (step.pattern.empty()) return JsonError(JoinPath(path, "pattern"), "empty pattern");
    SCD_ASSIGN_OR_RETURN(step.content, GetString(json, "content", path));
  } else if (type == "NFC") {
    step.kind = Kind::kNfc;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    SCD_ASSIGN_OR_RETURN(step.strip_left, GetBoolOr(json, "strip_left", true, path));
    SCD_ASSIGN_OR_RETURN(step.strip_right, GetBoolOr(json, "strip_right", true, path));
  } else {
    return JsonError(JoinPath(path, "type"), absl::StrCat("unsupported normalizer type: ", type));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

std::string Normalizer::Normalize(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.pattern);
        break;
      case Kind::kReplace:
        s = ReplaceAll(s, step.pattern, step.content);
        break;
      case Kind::kNfc:
        s = NfcNormalize(s);
        break;
      case Kind::kStrip:
        s = StripWhitespace(s, step.strip_left, step.strip_right);
        break;
    }
  }
  return s;
}

}  // namespace scd::tokenizer_internal
