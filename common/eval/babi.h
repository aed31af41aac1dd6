// bAbI question answering (Weston et al., 2015, "Towards AI-Complete Question Answering") in
// the format of ../shared/data/babi: numbered lines, where line 1 starts a new story, and a
// question line reads `N Question?<sep>answer<sep>supporting-line-numbers` with <sep> a '|'
// (this repo's copies of task 1) or a tab (the original format, kept by task 2's copies).
//
// Prompts follow the specialist's training format: the story so far — statements
// without their numbers, earlier questions of the same story with their answers as
// `Q: <question> A: <answer>.` — joined by single spaces, then `Q: <question> A:`. The answer
// is the greedy continuation up to '.'. Because an answered question is its prompt plus
// ` <answer>.`, every prompt of a story is a prefix of the next one and of the story's full
// transcript; BabiStoryView exposes that shared prefix for producers that prefill once.
#ifndef SCD_COMMON_EVAL_BABI_H_
#define SCD_COMMON_EVAL_BABI_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace scd::eval {

// One numbered line of a story.
struct BabiLine {
  int number = 0;  // the line's own number (1 starts a story)
  bool is_question = false;
  std::string text;                   // the statement, or the question ("Where is Mary?"), trimmed
  std::string answer;                 // questions only
  std::vector<int> supporting_facts;  // questions only: numbers of earlier lines
  int source_line = 0;                // 1-based line in the file, for messages
};

struct BabiStory {
  int story_id = 0;    // 0-based, counted across all files read together
  std::string source;  // the file it came from
  std::vector<BabiLine> lines;
};

// How a story is rendered into text. The defaults are the specialist's training format; the
// alternatives exist for the prompt-format check recorded in babi.cc.
struct BabiPromptFormat {
  std::string separator = " ";          // between sentences and Q/A items
  bool space_after_answer_cue = false;  // "A: " instead of "A:" at the end of a prompt
};

struct BabiExample {
  int story_id = 0;
  int question_index = 0;  // 0-based among the story's questions
  std::string location;    // "file:line" of the question
  std::string question;    // "Where is Mary?"
  std::string answer;      // "bathroom"
  std::string prompt;      // the story so far, then "Q: <question> A:"
};

struct BabiOptions {
  int max_examples = 0;           // total cap, in file order (0 = no cap)
  int max_examples_per_file = 0;  // cap per file, so several tasks mix evenly (0 = no cap)
  BabiPromptFormat format;
};

// Parses one file's text. `source` names the file in errors ("file:line: what is wrong").
// Blank lines and a trailing '\r' are tolerated; a line number that does not continue the
// story, a question without an answer, or a supporting fact that is not an earlier line of the
// story is an InvalidArgument error.
absl::StatusOr<std::vector<BabiStory>> ParseBabi(std::string_view text, std::string_view source,
                                                 int first_story_id = 0);

// Reads and parses a comma-separated list of files; story ids continue across files.
absl::StatusOr<std::vector<BabiStory>> ReadBabiFiles(std::string_view comma_separated_paths);

// One example per question, in file order, honouring the caps in `options`.
std::vector<BabiExample> MakeBabiExamples(const std::vector<BabiStory>& stories,
                                          const BabiOptions& options = {});

// ReadBabiFiles then MakeBabiExamples.
absl::StatusOr<std::vector<BabiExample>> LoadBabiExamples(std::string_view comma_separated_paths,
                                                          const BabiOptions& options = {});

// The prompt text for question `question_index` of `story` (what MakeBabiExamples builds).
std::string BabiPrompt(const BabiStory& story, int question_index,
                       const BabiPromptFormat& format = {});

// A story's shared-prefix view.
struct BabiQa {
  std::string question;
  std::string answer;
  // transcript.substr(0, prompt_end) is this question's prompt, byte for byte.
  size_t prompt_end = 0;
};

struct BabiStoryView {
  int story_id = 0;
  std::string story_text;  // the statements alone, joined by the separator
  std::vector<BabiQa> qa;  // in order
  // The whole story with every question answered ("... Q: <q> A: <a>. ..."). The story's
  // last prompt is a prefix of it, and so is every earlier prompt.
  std::string transcript;
};

BabiStoryView MakeBabiStoryView(const BabiStory& story, const BabiPromptFormat& format = {});

}  // namespace scd::eval

#endif  // SCD_COMMON_EVAL_BABI_H_
