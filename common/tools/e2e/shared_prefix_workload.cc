// See shared_prefix_workload.h.
#include "common/tools/e2e/shared_prefix_workload.h"

#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/eval/babi.h"

namespace scd::e2e {
namespace {

// "Mary moved to the bathroom." → {"Mary", "bathroom"}; false for other shapes.
bool ParseMove(const std::string& statement, std::string* person, std::string* place) {
  std::vector<std::string> words = absl::StrSplit(statement, ' ', absl::SkipEmpty());
  if (words.size() < 4 || words[words.size() - 2] != "the") return false;
  std::string last = words.back();
  if (!last.empty() && last.back() == '.') last.pop_back();
  if (last.empty()) return false;
  *person = words[0];
  *place = last;
  return true;
}

// The people of `statements` in order of mention and each one's last place; false when a
// statement is not a move.
bool ParseStatements(const std::vector<std::string>& statements, std::vector<std::string>* people,
                     std::map<std::string, std::string>* where) {
  if (statements.empty()) return false;
  for (const std::string& st : statements) {
    std::string person, place;
    if (!ParseMove(st, &person, &place)) return false;
    if (!where->count(person)) people->push_back(person);
    (*where)[person] = place;
  }
  return true;
}

std::vector<std::string> Statements(const eval::BabiStory& story) {
  std::vector<std::string> out;
  for (const auto& line : story.lines) {
    if (!line.is_question) out.push_back(line.text);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<SharedPrefixContext>> BuildBabiSharedPrefixWorkload(
    const std::string& babi_path, const Tokenizer& tokenizer, const SharedPrefixOptions& options) {
  absl::StatusOr<std::vector<eval::BabiStory>> stories = eval::ReadBabiFiles(babi_path);
  if (!stories.ok()) return stories.status();
  const int n = static_cast<int>(stories->size());
  if (n < 2)
    return absl::InvalidArgumentError(absl::StrCat(babi_path, " has fewer than 2 stories"));
  std::vector<SharedPrefixContext> out;
  for (int s = 0; s < n && static_cast<int>(out.size()) < options.contexts; ++s) {
    std::vector<std::string> own = Statements((*stories)[s]);
    // A story longer than the budget is cut to its longest beginning that fits and still
    // names enough people (the questions then ask about that beginning).
    std::vector<std::string> people;
    std::map<std::string, std::string> where;  // person → last place, in order of mention
    if (!ParseStatements(own, &people, &where)) continue;
    while (own.size() > 1 &&
           static_cast<int>(tokenizer.Encode(absl::StrJoin(own, " "), true).size()) >
               options.context_tokens) {
      std::vector<std::string> shorter(own.begin(), own.end() - 1);
      std::vector<std::string> p;
      std::map<std::string, std::string> w;
      ParseStatements(shorter, &p, &w);
      if (static_cast<int>(p.size()) < options.questions_per_context) break;
      own = std::move(shorter);
      people = std::move(p);
      where = std::move(w);
    }
    if (static_cast<int>(people.size()) < options.questions_per_context) continue;
    const int own_tokens = static_cast<int>(tokenizer.Encode(absl::StrJoin(own, " "), true).size());
    if (4 * own_tokens > 5 * options.context_tokens) continue;  // no beginning comes near it
    // Filler: statements of the following stories, prepended until the budget is reached.
    std::vector<std::string> filler;
    const std::string own_text = absl::StrJoin(own, " ");
    int tokens = static_cast<int>(tokenizer.Encode(own_text, true).size());
    for (int f = 1; f < n && tokens < options.context_tokens; ++f) {
      for (const std::string& st : Statements((*stories)[(s + f) % n])) {
        if (tokens >= options.context_tokens) break;
        filler.push_back(st);
        tokens += static_cast<int>(tokenizer.Encode(st, false).size()) + 1;
      }
    }
    SharedPrefixContext c;
    c.context = filler.empty() ? own_text : absl::StrCat(absl::StrJoin(filler, " "), " ", own_text);
    c.context_tokens = static_cast<int>(tokenizer.Encode(c.context, true).size());
    for (int q = 0; q < options.questions_per_context; ++q) {
      const std::string& person = people[static_cast<size_t>(q)];
      c.questions.push_back(
          {absl::StrCat(c.context, " Q: Where is ", person, "? A:"), where[person]});
    }
    out.push_back(std::move(c));
  }
  if (static_cast<int>(out.size()) < options.contexts) {
    return absl::InvalidArgumentError(
        absl::StrCat(babi_path, " yields only ", out.size(), " usable contexts with ",
                     options.questions_per_context, " people each; ", options.contexts, " asked"));
  }
  return out;
}

absl::StatusOr<std::vector<SharedPrefixContext>> LoadBabiSharedPrefixWorkload(
    const std::string& babi_path, const std::string& model_dir,
    const SharedPrefixOptions& options) {
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                       Tokenizer::FromFile(model_dir + "/tokenizer.json"));
  return BuildBabiSharedPrefixWorkload(babi_path, *tokenizer, options);
}

}  // namespace scd::e2e
