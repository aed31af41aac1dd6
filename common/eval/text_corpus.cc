// Corpus reading and half splits (see text_corpus.h).
#include "common/eval/text_corpus.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"

namespace scd::eval {
namespace {

// Debian's Abseil keeps its own absl::string_view, distinct from std::string_view (the
// project's API type); these convert at the boundary without copying.
absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
std::string_view ToStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }
std::string_view Trim(std::string_view s) { return ToStd(absl::StripAsciiWhitespace(ToAbsl(s))); }

// A WikiText heading: "= Title =", "= = Section = =", ... after trimming.
bool IsWikiHeading(std::string_view line) {
  return line.size() >= 3 && line.front() == '=' && line.back() == '=';
}

bool Full(const std::vector<std::string>& passages, int max_passages) {
  return max_passages > 0 && static_cast<int>(passages.size()) >= max_passages;
}

void AddPassage(std::string passage, const CorpusOptions& options, std::vector<std::string>* out) {
  std::string_view trimmed = Trim(passage);
  if (trimmed.size() < std::max<size_t>(options.min_chars, 1)) return;
  out->emplace_back(trimmed);
}

}  // namespace

std::vector<std::string> SplitPassages(std::string_view text, const CorpusOptions& options) {
  std::vector<std::string> passages;
  std::string current;
  for (absl::string_view piece : absl::StrSplit(ToAbsl(text), '\n')) {
    std::string_view line = ToStd(piece);
    if (Full(passages, options.max_passages)) return passages;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const bool blank = Trim(line).empty();
    if (options.format == CorpusFormat::kLines) {
      if (blank) continue;
      if (options.skip_headings && IsWikiHeading(Trim(line))) continue;
      AddPassage(std::string(line), options, &passages);
      continue;
    }
    if (blank) {
      if (!current.empty()) AddPassage(std::move(current), options, &passages);
      current.clear();
      continue;
    }
    if (!current.empty()) current += '\n';
    current += line;
  }
  if (!current.empty() && !Full(passages, options.max_passages)) {
    AddPassage(std::move(current), options, &passages);
  }
  return passages;
}

absl::StatusOr<std::vector<std::string>> ReadPassages(std::string_view comma_separated_paths,
                                                      const CorpusOptions& options) {
  std::vector<std::string> all;
  for (absl::string_view piece :
       absl::StrSplit(ToAbsl(comma_separated_paths), ',', absl::SkipWhitespace())) {
    SCD_ASSIGN_OR_RETURN(std::string text, ReadFileToString(std::string(Trim(ToStd(piece)))));
    CorpusOptions remaining = options;
    if (options.max_passages > 0) {
      remaining.max_passages = options.max_passages - static_cast<int>(all.size());
      if (remaining.max_passages <= 0) break;
    }
    for (std::string& p : SplitPassages(text, remaining)) all.push_back(std::move(p));
  }
  return all;
}

absl::StatusOr<PassageSplit> SplitInHalves(absl::Span<const int32_t> tokens, int max_tokens) {
  const size_t n =
      max_tokens > 0 ? std::min(tokens.size(), static_cast<size_t>(max_tokens)) : tokens.size();
  if (n < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a half split needs at least 2 tokens, got ", n));
  }
  PassageSplit split;
  split.tokens.assign(tokens.begin(), tokens.begin() + n);
  split.prefix_length = static_cast<int>(n / 2);
  return split;
}

absl::StatusOr<std::vector<PassageSplit>> MakePassageSplits(
    const Tokenizer& tokenizer, const std::vector<std::string>& passages,
    const SplitOptions& options) {
  if (options.max_tokens > 0 && options.max_tokens < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be at least 2, got ", options.max_tokens));
  }
  std::vector<PassageSplit> splits;
  for (size_t i = 0; i < passages.size(); ++i) {
    if (options.max_passages > 0 && static_cast<int>(splits.size()) >= options.max_passages) {
      break;
    }
    const std::vector<int32_t> ids = tokenizer.Encode(passages[i], /*add_special_tokens=*/true);
    const size_t kept = options.max_tokens > 0
                            ? std::min(ids.size(), static_cast<size_t>(options.max_tokens))
                            : ids.size();
    if (kept < static_cast<size_t>(std::max(options.min_tokens, 2))) continue;
    SCD_ASSIGN_OR_RETURN(PassageSplit split, SplitInHalves(ids, options.max_tokens));
    split.passage_index = static_cast<int>(i);
    splits.push_back(std::move(split));
  }
  return splits;
}

}  // namespace scd::eval
