// Tests for fitting bAbI prompts into a context budget: skip and drop-oldest policies, with
// the bundled tokenizer counting tokens.
#include "common/eval/babi_context.h"

#include <catch2/catch.hpp>

#include "tests/test_support.h"

namespace scd::eval {
namespace {

constexpr char kStory[] =
    "1 Mary moved to the bathroom.\n"
    "2 John went to the hallway.\n"
    "3 Where is Mary? |bathroom|1\n"
    "4 Daniel went back to the hallway.\n"
    "5 Sandra journeyed to the garden.\n"
    "6 Where is Daniel? |hallway|4\n";

int Tokens(const Tokenizer& tok, const std::string& text) {
  return static_cast<int>(tok.Encode(text, true).size());
}

TEST_CASE("overlong bAbI prompts are truncated at item boundaries or skipped", "[cpu]") {
  auto tokenizer = Tokenizer::FromFile(testing::SharedPath("models/stories260K/tokenizer.json"));
  REQUIRE(tokenizer.ok());
  const Tokenizer& tok = **tokenizer;
  auto stories = ParseBabi(kStory, "inline");
  REQUIRE(stories.ok());
  const std::vector<BabiExample> examples = MakeBabiExamples(*stories);
  REQUIRE(examples.size() == 2);
  const std::string last_two = "Sandra journeyed to the garden. Q: Where is Daniel? A:";
  const std::string last_three = "Daniel went back to the hallway. " + last_two;
  // A budget that fits the first prompt whole and the second only without its oldest items.
  const int budget = Tokens(tok, last_three);
  REQUIRE(Tokens(tok, examples[0].prompt) <= budget);
  REQUIRE(Tokens(tok, examples[1].prompt) > budget);

  BabiContextOptions options;
  options.max_prompt_tokens = budget;
  BabiContextReport report;
  auto fitted = FitBabiExamplesToContext(*stories, examples, tok, options, {}, &report);
  REQUIRE(fitted.ok());
  REQUIRE(fitted->size() == 2);
  CHECK((*fitted)[0].prompt == examples[0].prompt);
  CHECK((*fitted)[1].prompt == last_three);  // the fewest items dropped that fit
  CHECK((*fitted)[1].answer == "hallway");
  CHECK(report.kept == 1);
  CHECK(report.truncated == 1);
  CHECK(report.skipped == 0);

  options.policy = OverlongPromptPolicy::kSkip;
  fitted = FitBabiExamplesToContext(*stories, examples, tok, options, {}, &report);
  REQUIRE(fitted.ok());
  REQUIRE(fitted->size() == 1);
  CHECK(report.skipped == 1);

  // Not even the question fits: skipped under either policy.
  options.policy = OverlongPromptPolicy::kDropOldest;
  options.max_prompt_tokens = 3;
  fitted = FitBabiExamplesToContext(*stories, examples, tok, options, {}, &report);
  REQUIRE(fitted.ok());
  CHECK(fitted->empty());
  CHECK(report.skipped == 2);

  options.max_prompt_tokens = 4;
  CHECK(FitBabiExamplesToContext({}, examples, tok, options).status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("bundled qa2 dev: every prompt fits 504 tokens after truncation", "[cpu]") {
  auto tokenizer = Tokenizer::FromFile(testing::SharedPath("models/stories260K/tokenizer.json"));
  REQUIRE(tokenizer.ok());
  auto stories = ReadBabiFiles(testing::SharedPath("data/babi/qa2_two-supporting-facts_dev.txt"));
  REQUIRE(stories.ok());
  BabiContextReport report;
  auto fitted = FitBabiExamplesToContext(*stories, MakeBabiExamples(*stories), **tokenizer,
                                         BabiContextOptions{}, {}, &report);
  REQUIRE(fitted.ok());
  CHECK(fitted->size() == 500);
  CHECK(report.truncated == 56);  // measured: 56 of 500 qa2 dev prompts exceed 504 tokens
  for (const BabiExample& ex : *fitted) {
    CHECK(static_cast<int>((*tokenizer)->Encode(ex.prompt, true).size()) <= 504);
  }
}

}  // namespace
}  // namespace scd::eval
