// See calibration_corpus.h.
#include "common/scd/calibration_corpus.h"

#include <algorithm>
#include <cctype>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/eval/babi.h"
#include "common/eval/text_corpus.h"

namespace scd {
namespace {

bool LooksLikeBabi(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t digits = 0;
  while (i + digits < text.size() && std::isdigit(static_cast<unsigned char>(text[i + digits]))) {
    ++digits;
  }
  return digits > 0 && i + digits < text.size() && text[i + digits] == ' ';
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int32_t>>> LoadCalibrationPassages(
    const std::vector<std::string>& files, const Tokenizer& tokenizer, const CorpusLoadOptions& o,
    std::vector<int>* sources) {
  if (files.empty()) return absl::InvalidArgumentError("no calibration corpus files given");
  std::vector<std::vector<std::vector<int32_t>>> per_file;
  for (const std::string& path : files) {
    SCD_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    std::vector<std::string> passages;
    if (LooksLikeBabi(text)) {
      SCD_ASSIGN_OR_RETURN(auto stories, eval::ParseBabi(text, path));
      for (const auto& story : stories)
        passages.push_back(eval::MakeBabiStoryView(story).transcript);
    } else {
      passages = eval::SplitPassages(text);
    }
    std::vector<std::vector<int32_t>> ids;
    for (const std::string& p : passages) {
      std::vector<int32_t> t = tokenizer.Encode(p);
      if (static_cast<int>(t.size()) > o.max_tokens_per_passage) t.resize(o.max_tokens_per_passage);
      if (static_cast<int>(t.size()) >= o.min_tokens) ids.push_back(std::move(t));
    }
    if (ids.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": no passage of at least ", o.min_tokens, " tokens"));
    }
    std::mt19937_64 rng(o.seed);
    std::shuffle(ids.begin(), ids.end(), rng);
    per_file.push_back(std::move(ids));
  }
  // Round-robin across files until the token budget is spent, so every file is represented.
  std::vector<std::pair<std::vector<int32_t>, int>> mixed;
  long total = 0;
  for (size_t i = 0;; ++i) {
    bool any = false;
    for (size_t f = 0; f < per_file.size(); ++f) {
      if (i >= per_file[f].size()) continue;
      any = true;
      if (total >= o.max_total_tokens) break;
      total += static_cast<long>(per_file[f][i].size());
      mixed.push_back({std::move(per_file[f][i]), static_cast<int>(f)});
    }
    if (!any || total >= o.max_total_tokens) break;
  }
  std::mt19937_64 rng(o.seed + 1);
  std::shuffle(mixed.begin(), mixed.end(), rng);
  std::vector<std::vector<int32_t>> out;
  if (sources != nullptr) sources->clear();
  for (auto& [ids, f] : mixed) {
    out.push_back(std::move(ids));
    if (sources != nullptr) sources->push_back(f);
  }
  return out;
}

}  // namespace scd

namespace scd {

void SplitHeldOut(std::vector<std::vector<int32_t>> passages, const std::vector<int>& sources,
                  const std::vector<int>& select_sources, int holdout,
                  std::vector<std::vector<int32_t>>* train,
                  std::vector<std::vector<int32_t>>* held) {
  std::vector<std::vector<std::vector<int32_t>>> helds;
  SplitHeldOutPerConsumer(std::move(passages), sources, {select_sources}, holdout, train, &helds);
  *held = std::move(helds[0]);
}

void SplitHeldOutPerConsumer(std::vector<std::vector<int32_t>> passages,
                             const std::vector<int>& sources,
                             const std::vector<std::vector<int>>& select_sources, int holdout,
                             std::vector<std::vector<int32_t>>* train,
                             std::vector<std::vector<std::vector<int32_t>>>* held) {
  train->clear();
  held->assign(select_sources.size(), {});
  std::vector<int> held_by(passages.size(), -1);
  for (size_t c = 0; c < select_sources.size(); ++c) {
    const std::vector<int>& select = select_sources[c];
    int taken = 0;
    for (size_t i = passages.size(); i-- > 0 && taken < holdout;) {
      const bool eligible =
          held_by[i] < 0 &&
          (select.empty() || std::find(select.begin(), select.end(), sources[i]) != select.end());
      if (eligible) {
        held_by[i] = static_cast<int>(c);
        ++taken;
      }
    }
  }
  for (size_t i = 0; i < passages.size(); ++i) {
    if (held_by[i] < 0) {
      train->push_back(std::move(passages[i]));
    } else {
      (*held)[held_by[i]].push_back(std::move(passages[i]));
    }
  }
}

}  // namespace scd
