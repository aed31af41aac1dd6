// bAbI parsing and prompt rendering (see babi.h for the format and the prompt invariant).
//
// Prompt format, checked against the specialist (stories260K-babi-qa) on qa1 dev: whole story
// transcripts joined by single spaces score 0.227 nats/token (the README's 0.23; the base
// model scores 2.871, README 2.87), joined by newlines 0.907 — so training joined items with
// single spaces. A space after the final "A:" makes every greedy answer wrong (EM 0/100): the
// prompt then ends in a lone U+2581 token that training never produced, because the answer
// token carries its own leading space. Hence the defaults: " " and "A:".
#include "common/eval/babi.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
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

absl::Status LineError(std::string_view source, int line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source), ":", line, ": ", ToAbsl(what)));
}

// Parses `rest` (the line after its number) as a question; `number` is the line's number.
absl::Status ParseQuestion(std::string_view rest, int number, std::string_view source, int line,
                           BabiLine* out) {
  std::vector<absl::string_view> fields = absl::StrSplit(ToAbsl(rest), absl::ByAnyChar("|\t"));
  if (fields.size() < 2 || fields.size() > 3) {
    return LineError(source, line,
                     absl::StrCat("a question line needs `question|answer|supporting facts`, "
                                  "got ",
                                  fields.size(), " fields"));
  }
  out->is_question = true;
  out->text = std::string(absl::StripAsciiWhitespace(fields[0]));
  out->answer = std::string(absl::StripAsciiWhitespace(fields[1]));
  if (out->text.empty()) return LineError(source, line, "empty question");
  if (out->answer.empty()) return LineError(source, line, "question without an answer");
  if (fields.size() == 3) {
    for (absl::string_view token : absl::StrSplit(fields[2], ' ', absl::SkipWhitespace())) {
      int fact = 0;
      if (!absl::SimpleAtoi(token, &fact)) {
        return LineError(source, line, absl::StrCat("bad supporting fact '", token, "'"));
      }
      if (fact < 1 || fact >= number) {
        return LineError(source, line,
                         absl::StrCat("supporting fact ", fact, " is not an earlier line"));
      }
      out->supporting_facts.push_back(fact);
    }
  }
  return absl::OkStatus();
}

// Appends `item` to `text`, separated from what is already there.
void AppendItem(std::string* text, std::string_view item, const BabiPromptFormat& format) {
  if (!text->empty()) text->append(format.separator);
  text->append(item);
}

std::string AnswerCue(const BabiPromptFormat& format) {
  return format.space_after_answer_cue ? "A: " : "A:";
}

}  // namespace

absl::StatusOr<std::vector<BabiStory>> ParseBabi(std::string_view text, std::string_view source,
                                                 int first_story_id) {
  std::vector<BabiStory> stories;
  int line_no = 0;
  for (absl::string_view piece : absl::StrSplit(ToAbsl(text), '\n')) {
    ++line_no;
    std::string_view line = Trim(ToStd(piece));  // also drops a Windows '\r'
    if (line.empty()) continue;
    size_t digits = 0;
    while (digits < line.size() && absl::ascii_isdigit(static_cast<unsigned char>(line[digits]))) {
      ++digits;
    }
    int number = 0;
    if (digits == 0 || !absl::SimpleAtoi(ToAbsl(line.substr(0, digits)), &number)) {
      return LineError(source, line_no, "expected a line number");
    }
    if (digits == line.size() || (line[digits] != ' ' && line[digits] != '\t')) {
      return LineError(source, line_no, "expected a space after the line number");
    }
    std::string_view rest = line.substr(digits + 1);
    if (number == 1) {
      BabiStory story;
      story.story_id = first_story_id + static_cast<int>(stories.size());
      story.source = std::string(source);
      stories.push_back(std::move(story));
    } else if (stories.empty()) {
      return LineError(source, line_no, absl::StrCat("a story must start at line 1, got ", number));
    } else if (number != stories.back().lines.back().number + 1) {
      return LineError(source, line_no,
                       absl::StrCat("line number ", number, " does not follow ",
                                    stories.back().lines.back().number));
    }
    BabiLine parsed;
    parsed.number = number;
    parsed.source_line = line_no;
    if (rest.find_first_of("|\t") != std::string_view::npos) {
      SCD_RETURN_IF_ERROR(ParseQuestion(rest, number, source, line_no, &parsed));
    } else {
      parsed.text = std::string(Trim(rest));
      if (parsed.text.empty()) return LineError(source, line_no, "empty statement");
    }
    stories.back().lines.push_back(std::move(parsed));
  }
  return stories;
}

absl::StatusOr<std::vector<BabiStory>> ReadBabiFiles(std::string_view comma_separated_paths) {
  std::vector<BabiStory> all;
  for (absl::string_view piece :
       absl::StrSplit(ToAbsl(comma_separated_paths), ',', absl::SkipWhitespace())) {
    const std::string_view path = Trim(ToStd(piece));
    SCD_ASSIGN_OR_RETURN(std::string text, ReadFileToString(std::string(path)));
    SCD_ASSIGN_OR_RETURN(std::vector<BabiStory> stories,
                         ParseBabi(text, path, static_cast<int>(all.size())));
    for (BabiStory& s : stories) all.push_back(std::move(s));
  }
  if (all.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no bAbI stories in '", ToAbsl(comma_separated_paths), "'"));
  }
  return all;
}

std::string BabiPrompt(const BabiStory& story, int question_index, const BabiPromptFormat& format) {
  std::string text;
  int seen = 0;
  for (const BabiLine& line : story.lines) {
    if (!line.is_question) {
      AppendItem(&text, line.text, format);
      continue;
    }
    if (seen++ == question_index) {
      AppendItem(&text, absl::StrCat("Q: ", line.text, " ", AnswerCue(format)), format);
      return text;
    }
    AppendItem(&text, absl::StrCat("Q: ", line.text, " A: ", line.answer, "."), format);
  }
  return text;  // question_index out of range: the whole transcript
}

std::vector<BabiExample> MakeBabiExamples(const std::vector<BabiStory>& stories,
                                          const BabiOptions& options) {
  std::vector<BabiExample> examples;
  std::string current_source;
  int from_this_file = 0;
  for (const BabiStory& story : stories) {
    if (story.source != current_source) {
      current_source = story.source;
      from_this_file = 0;
    }
    const BabiStoryView view = MakeBabiStoryView(story, options.format);
    int q = 0;
    for (const BabiLine& line : story.lines) {
      if (!line.is_question) continue;
      if (options.max_examples > 0 && static_cast<int>(examples.size()) >= options.max_examples) {
        return examples;
      }
      if (options.max_examples_per_file > 0 && from_this_file >= options.max_examples_per_file) {
        break;
      }
      BabiExample ex;
      ex.story_id = story.story_id;
      ex.question_index = q;
      ex.location = absl::StrCat(story.source, ":", line.source_line);
      ex.question = line.text;
      ex.answer = line.answer;
      ex.prompt = view.transcript.substr(0, view.qa[q].prompt_end);
      examples.push_back(std::move(ex));
      ++from_this_file;
      ++q;
    }
  }
  return examples;
}

absl::StatusOr<std::vector<BabiExample>> LoadBabiExamples(std::string_view comma_separated_paths,
                                                          const BabiOptions& options) {
  SCD_ASSIGN_OR_RETURN(std::vector<BabiStory> stories, ReadBabiFiles(comma_separated_paths));
  return MakeBabiExamples(stories, options);
}

BabiStoryView MakeBabiStoryView(const BabiStory& story, const BabiPromptFormat& format) {
  BabiStoryView view;
  view.story_id = story.story_id;
  for (const BabiLine& line : story.lines) {
    if (!line.is_question) {
      AppendItem(&view.story_text, line.text, format);
      AppendItem(&view.transcript, line.text, format);
      continue;
    }
    AppendItem(&view.transcript, absl::StrCat("Q: ", line.text, " ", AnswerCue(format)), format);
    BabiQa qa;
    qa.question = line.text;
    qa.answer = line.answer;
    qa.prompt_end = view.transcript.size();
    // The answered form is always "A: <answer>."; with the trailing-space cue the space is
    // already in place.
    absl::StrAppend(&view.transcript, format.space_after_answer_cue ? "" : " ", line.answer, ".");
    view.qa.push_back(std::move(qa));
  }
  return view;
}

}  // namespace scd::eval
