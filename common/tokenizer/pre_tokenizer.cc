// Pre-tokenizer steps, each mapping a (piece, starts-at-offset-0) pair to zero or more
// pieces, run depth first so that words reach the model as they are found. Semantics follow
// HF's pre_tokenizers/*.rs:
//   Split      cut by the pattern with the given delimiter behaviour (split.h);
//   ByteLevel  optionally prepend ' ' (when the piece does not already start with one), cut
//              with the GPT-2 regex when use_regex, then map every byte through
//              bytes_to_unicode so BPE sees printable characters only;
//   Metaspace  ' ' -> replacement, prepend the replacement (always / only on the piece at
//              offset 0 / never; never to an empty piece or one already starting with it), and
//              when split, cut before every replacement character (MergedWithNext).
#include "common/tokenizer/pre_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/unicode.h"

namespace scd::tokenizer_internal {
namespace {

std::string ReplaceSpaces(std::string_view text, std::string_view replacement) {
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  for (char c : text) {
    if (c == ' ') {
      out.append(replacement);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<PrependScheme> ParsePrependScheme(const Json& json, std::string_view path) {
  if (const Json* scheme = FindField(json, "prepend_scheme")) {
    if (!scheme->is_string()) return JsonError(JoinPath(path, "prepend_scheme"), "not a string");
    const std::string s = scheme->get<std::string>();
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    return JsonError(JoinPath(path, "prepend_scheme"), absl::StrCat("unsupported scheme: ", s));
  }
  // Files written before tokenizers 0.14 carry add_prefix_space instead (default true).
  SCD_ASSIGN_OR_RETURN(const bool add_prefix, GetBoolOr(json, "add_prefix_space", true, path));
  return add_prefix ? PrependScheme::kAlways : PrependScheme::kNever;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& json,
                                                                     std::string_view path) {
  auto pre = std::unique_ptr<PreTokenizer>(new PreTokenizer);
  SCD_RETURN_IF_ERROR(pre->Add(json, path));
  return pre;
}

absl::Status PreTokenizer::Add(const Json& json, std::string_view path) {
  SCD_ASSIGN_OR_RETURN(const std::string type, GetType(json, path));
  if (type == "Sequence") {
    return ForEachInSequence(
        json, "pretokenizers", path,
        [this](const Json& item, std::string_view item_path) { return Add(item, item_path); });
  }
  Step step;
  if (type == "Split") {
    step.kind = Kind::kSplit;
    bool is_regex = false;
    SCD_ASSIGN_OR_RETURN(const std::string pattern, GetPattern(json, "pattern", path, &is_regex));
    if (is_regex) {
      auto regex = RecognizeRegex(pattern);
      if (!regex.ok()) return JsonError(JoinPath(path, "pattern"), Sv(regex.status().message()));
      step.pattern = SplitPattern::Regex(*regex);
    } else {
      step.pattern = SplitPattern::Literal(pattern);
    }
    SCD_ASSIGN_OR_RETURN(const std::string behavior, GetString(json, "behavior", path));
    auto parsed = ParseSplitBehavior(behavior);
    if (!parsed.ok()) return JsonError(JoinPath(path, "behavior"), Sv(parsed.status().message()));
    step.behavior = *parsed;
    SCD_ASSIGN_OR_RETURN(step.invert, GetBoolOr(json, "invert", false, path));
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    step.pattern = SplitPattern::Regex(KnownRegex::kGpt2);
    SCD_ASSIGN_OR_RETURN(step.add_prefix_space, GetBoolOr(json, "add_prefix_space", true, path));
    SCD_ASSIGN_OR_RETURN(step.use_regex, GetBoolOr(json, "use_regex", true, path));
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    SCD_ASSIGN_OR_RETURN(const char32_t replacement,
                         GetCharOr(json, "replacement", U'\u2581', path));
    AppendUtf8(replacement, &step.replacement);
    step.pattern = SplitPattern::Literal(step.replacement);
    step.behavior = SplitBehavior::kMergedWithNext;
    SCD_ASSIGN_OR_RETURN(step.prepend_scheme, ParsePrependScheme(json, path));
    SCD_ASSIGN_OR_RETURN(step.use_regex, GetBoolOr(json, "split", true, path));
  } else {
    return JsonError(JoinPath(path, "type"),
                     absl::StrCat("unsupported pre_tokenizer type: ", type));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

void PreTokenizer::Run(size_t step_index, std::string_view piece, bool at_start,
                       absl::FunctionRef<void(std::string_view word)> f) const {
  if (piece.empty()) return;
  if (step_index == steps_.size()) {
    f(piece);
    return;
  }
  const Step& step = steps_[step_index];
  auto next = [&](std::string_view text, bool split) {
    if (!split) {
      Run(step_index + 1, text, at_start, f);
      return;
    }
    ForEachPiece(text, step.pattern, step.behavior, step.invert, [&](size_t begin, size_t end) {
      Run(step_index + 1, text.substr(begin, end - begin), at_start && begin == 0, f);
    });
  };
  switch (step.kind) {
    case Kind::kSplit:
      next(piece, /*split=*/true);
      break;
    case Kind::kByteLevel: {
      // Split first (with the optional leading space), then map each word's bytes.
      std::string text;
      if (step.add_prefix_space && piece[0] != ' ') {
        text.reserve(piece.size() + 1);
        text.push_back(' ');
        text.append(piece);
        piece = text;
      }
      auto map_bytes = [&](std::string_view word, bool word_at_start) {
        std::string mapped;
        mapped.reserve(word.size() * 2);
        for (char c : word) mapped.append(ByteToUnicode(static_cast<uint8_t>(c)));
        Run(step_index + 1, mapped, word_at_start, f);
      };
      if (!step.use_regex) {
        map_bytes(piece, at_start);
      } else {
        ForEachPiece(piece, step.pattern, step.behavior, step.invert,
                     [&](size_t begin, size_t end) {
                       map_bytes(piece.substr(begin, end - begin), at_start && begin == 0);
                     });
      }
      break;
    }
    case Kind::kMetaspace: {
      std::string text = ReplaceSpaces(piece, step.replacement);
      const bool prepend = step.prepend_scheme == PrependScheme::kAlways ||
                           (step.prepend_scheme == PrependScheme::kFirst && at_start);
      if (prepend && text.compare(0, step.replacement.size(), step.replacement) != 0) {
        text.insert(0, step.replacement);
      }
      next(text, step.use_regex);
      break;
    }
  }
}

void PreTokenizer::Split(std::string_view piece, bool at_start,
                         absl::FunctionRef<void(std::string_view word)> f) const {
  Run(0, piece, at_start, f);
}

}  // namespace scd::tokenizer_internal
