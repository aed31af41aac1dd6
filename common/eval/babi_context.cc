// Context fitting for bAbI prompts (see babi_context.h). The prompt's items are rebuilt from
// the story so whole sentences are dropped, never parts of one; the number of dropped items is
// found by binary search, since a prompt's token count grows with every item kept.
#include "common/eval/babi_context.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"

namespace scd::eval {
namespace {

// The items of question `question_index`'s prompt: statements and answered questions before
// it, then the question with its answer cue.
std::vector<std::string> PromptItems(const BabiStory& story, int question_index,
                                     const BabiPromptFormat& format) {
  std::vector<std::string> items;
  int seen = 0;
  for (const BabiLine& line : story.lines) {
    if (!line.is_question) {
      items.push_back(line.text);
    } else if (seen++ == question_index) {
      items.push_back(
          absl::StrCat("Q: ", line.text, format.space_after_answer_cue ? " A: " : " A:"));
      break;
    } else {
      items.push_back(absl::StrCat("Q: ", line.text, " A: ", line.answer, "."));
    }
  }
  return items;
}

std::string JoinFrom(const std::vector<std::string>& items, size_t first,
                     const BabiPromptFormat& format) {
  std::string out;
  for (size_t i = first; i < items.size(); ++i) {
    if (!out.empty()) out += format.separator;
    out += items[i];
  }
  return out;
}

bool Fits(const Tokenizer& tokenizer, const std::string& prompt, int budget) {
  return static_cast<int>(tokenizer.Encode(prompt, /*add_special_tokens=*/true).size()) <= budget;
}

}  // namespace

absl::StatusOr<std::vector<BabiExample>> FitBabiExamplesToContext(
    const std::vector<BabiStory>& stories, std::vector<BabiExample> examples,
    const Tokenizer& tokenizer, const BabiContextOptions& options, const BabiPromptFormat& format,
    BabiContextReport* report) {
  std::map<int, const BabiStory*> by_id;
  for (const BabiStory& s : stories) by_id[s.story_id] = &s;
  BabiContextReport counts;
  std::vector<BabiExample> out;
  out.reserve(examples.size());
  for (BabiExample& ex : examples) {
    if (Fits(tokenizer, ex.prompt, options.max_prompt_tokens)) {
      ++counts.kept;
      out.push_back(std::move(ex));
      continue;
    }
    if (options.policy == OverlongPromptPolicy::kSkip) {
      ++counts.skipped;
      continue;
    }
    auto it = by_id.find(ex.story_id);
    if (it == by_id.end()) {
      return absl::NotFoundError(
          absl::StrCat("no story ", ex.story_id, " for the example at ", ex.location));
    }
    const std::vector<std::string> items = PromptItems(*it->second, ex.question_index, format);
    // Smallest number of dropped items that fits; the question itself is never dropped.
    size_t lo = 1, hi = items.size() - 1;
    if (!Fits(tokenizer, JoinFrom(items, hi, format), options.max_prompt_tokens)) {
      ++counts.skipped;
      continue;
    }
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (Fits(tokenizer, JoinFrom(items, mid, format), options.max_prompt_tokens)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    ex.prompt = JoinFrom(items, lo, format);
    ++counts.truncated;
    out.push_back(std::move(ex));
  }
  if (report != nullptr) *report = counts;
  return out;
}

}  // namespace scd::eval
