// Tests for the bAbI parser and prompt builder: exact prompts on an inline fixture, the
// shared-prefix invariant, malformed-line errors that name file:line, and the bundled dev
// files' example counts.
#include "common/eval/babi.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tests/test_support.h"

namespace scd::eval {
namespace {

constexpr char kFixture[] =
    "1 Mary moved to the bathroom.\n"
    "2 John went to the hallway.\n"
    "3 Where is Mary? |bathroom|1\n"
    "4 Daniel went back to the hallway.\n"
    "5 Where is Daniel?\thallway\t4\n"
    "1 Sandra travelled to the office.\r\n"
    "2 Where is Sandra? |office|1\n"
    "\n";

std::string WriteFixture(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST_CASE("bAbI fixture parses into stories with exact prompts", "[cpu]") {
  const std::string path = WriteFixture("tiny_babi.txt", kFixture);
  auto stories = ReadBabiFiles(path);
  REQUIRE(stories.ok());
  REQUIRE(stories->size() == 2);
  const BabiStory& first = (*stories)[0];
  CHECK(first.story_id == 0);
  CHECK(first.source == path);
  REQUIRE(first.lines.size() == 5);
  CHECK(first.lines[2].is_question);
  CHECK(first.lines[2].text == "Where is Mary?");
  CHECK(first.lines[2].answer == "bathroom");
  CHECK(first.lines[2].supporting_facts == std::vector<int>{1});
  CHECK(first.lines[4].answer == "hallway");  // tab-separated, as in the original bAbI
  CHECK((*stories)[1].lines[0].text == "Sandra travelled to the office.");  // '\r' dropped

  auto examples = LoadBabiExamples(path);
  REQUIRE(examples.ok());
  REQUIRE(examples->size() == 3);
  const BabiExample& e0 = (*examples)[0];
  CHECK(e0.story_id == 0);
  CHECK(e0.question_index == 0);
  CHECK(e0.location == path + ":3");
  CHECK(e0.question == "Where is Mary?");
  CHECK(e0.answer == "bathroom");
  CHECK(e0.prompt == "Mary moved to the bathroom. John went to the hallway. Q: Where is Mary? A:");
  CHECK((*examples)[1].prompt ==
        "Mary moved to the bathroom. John went to the hallway. Q: Where is Mary? A: bathroom. "
        "Daniel went back to the hallway. Q: Where is Daniel? A:");
  CHECK((*examples)[2].story_id == 1);
  CHECK((*examples)[2].prompt == "Sandra travelled to the office. Q: Where is Sandra? A:");
}

TEST_CASE("bAbI prompt format variants and caps", "[cpu]") {
  auto stories = ParseBabi(kFixture, "inline");
  REQUIRE(stories.ok());
  BabiOptions options;
  options.format.separator = "\n";
  options.format.space_after_answer_cue = true;
  auto examples = MakeBabiExamples(*stories, options);
  REQUIRE(examples.size() == 3);
  CHECK(examples[1].prompt ==
        "Mary moved to the bathroom.\nJohn went to the hallway.\nQ: Where is Mary? A: bathroom."
        "\nDaniel went back to the hallway.\nQ: Where is Daniel? A: ");
  CHECK(BabiPrompt((*stories)[0], 1, options.format) == examples[1].prompt);

  BabiOptions capped;
  capped.max_examples = 2;
  CHECK(MakeBabiExamples(*stories, capped).size() == 2);
  // Story ids continue across files; the per-file cap applies to each file.
  const std::string a = WriteFixture("a.txt", kFixture);
  const std::string b = WriteFixture("b.txt", kFixture);
  BabiOptions per_file;
  per_file.max_examples_per_file = 1;
  auto mixed = LoadBabiExamples(a + "," + b, per_file);
  REQUIRE(mixed.ok());
  REQUIRE(mixed->size() == 2);
  CHECK((*mixed)[0].location == a + ":3");
  CHECK((*mixed)[1].location == b + ":3");
  CHECK((*mixed)[1].story_id == 2);
}

TEST_CASE("bAbI story view: every prompt is a prefix of the transcript", "[cpu]") {
  auto stories = ParseBabi(kFixture, "inline");
  REQUIRE(stories.ok());
  for (bool trailing_space : {false, true}) {
    BabiPromptFormat format;
    format.space_after_answer_cue = trailing_space;
    const BabiStoryView view = MakeBabiStoryView((*stories)[0], format);
    CHECK(view.story_text ==
          "Mary moved to the bathroom. John went to the hallway. Daniel went back to the hallway.");
    CHECK(view.transcript ==
          "Mary moved to the bathroom. John went to the hallway. Q: Where is Mary? A: bathroom. "
          "Daniel went back to the hallway. Q: Where is Daniel? A: hallway.");
    REQUIRE(view.qa.size() == 2);
    CHECK(view.qa[1].question == "Where is Daniel?");
    CHECK(view.qa[1].answer == "hallway");
    for (size_t q = 0; q < view.qa.size(); ++q) {
      CHECK(view.transcript.substr(0, view.qa[q].prompt_end) ==
            BabiPrompt((*stories)[0], static_cast<int>(q), format));
    }
  }
}

TEST_CASE("malformed bAbI lines are errors naming file:line", "[cpu]") {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"1 A.\n3 B.\n", "bad.txt:2: line number 3 does not follow 1"},
      {"2 A.\n", "bad.txt:1: a story must start at line 1"},
      {"1 A.\nx B.\n", "bad.txt:2: expected a line number"},
      {"1 A.\n2 Where? |\n", "bad.txt:2: question without an answer"},
      {"1 A.\n2 Where? |a|1|2\n", "bad.txt:2: a question line needs"},
      {"1 A.\n2 Where? |a|2\n", "bad.txt:2: supporting fact 2 is not an earlier line"},
      {"1 A.\n2 Where? |a|one\n", "bad.txt:2: bad supporting fact 'one'"},
      {"1A.\n", "bad.txt:1: expected a space after the line number"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseBabi(c.text, "bad.txt");
    INFO(c.text);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(parsed.status().message()).find(c.message) != std::string::npos);
  }
  CHECK(ReadBabiFiles(testing::TempDir() + "/none.txt").status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(!ReadBabiFiles("").ok());
}

TEST_CASE("bundled bAbI dev files: 500 questions in 100 stories each", "[cpu]") {
  const std::string qa1 = testing::SharedPath("data/babi/qa1_single-supporting-fact_dev.txt");
  const std::string qa2 = testing::SharedPath("data/babi/qa2_two-supporting-facts_dev.txt");
  auto stories = ReadBabiFiles(qa1);
  REQUIRE(stories.ok());
  CHECK(stories->size() == 100);
  auto examples = LoadBabiExamples(qa1);
  REQUIRE(examples.ok());
  REQUIRE(examples->size() == 500);
  CHECK((*examples)[0].prompt ==
        "John travelled to the hallway. Mary journeyed to the bathroom. Q: Where is John? A:");
  CHECK((*examples)[0].answer == "hallway");
  CHECK((*examples)[1].prompt ==
        "John travelled to the hallway. Mary journeyed to the bathroom. Q: Where is John? A: "
        "hallway. Daniel went back to the bathroom. John moved to the bedroom. Q: Where is "
        "Mary? A:");

  auto both = LoadBabiExamples(qa1 + "," + qa2);  // qa2's copy uses tabs, qa1's uses '|'
  REQUIRE(both.ok());
  CHECK(both->size() == 1000);
  CHECK(both->back().story_id == 199);
  CHECK(both->back().answer.find('\t') == std::string::npos);
  BabiOptions per_file;
  per_file.max_examples_per_file = 150;
  auto balanced = LoadBabiExamples(qa1 + "," + qa2, per_file);
  REQUIRE(balanced.ok());
  CHECK(balanced->size() == 300);
  CHECK((*balanced)[150].location.find("qa2_") != std::string::npos);
}

}  // namespace
}  // namespace scd::eval
