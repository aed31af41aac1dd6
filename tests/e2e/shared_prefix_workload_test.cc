// The e2e bench's shared-prefix workload from bAbI task 1: contexts near the asked length
// (filler in front of a story, or a story cut to a beginning that fits), every question's
// answer the person's last place in its context, and the prompt the context and the question.
#include "common/tools/e2e/shared_prefix_workload.h"

#include <catch2/catch.hpp>
#include <string>

#include "absl/strings/str_split.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace scd::e2e {
namespace {

// The last place `person` moved to in `context` ("<person> <verb> to the <place>.").
std::string LastPlace(const std::string& context, const std::string& person) {
  std::string place;
  for (absl::string_view sentence : absl::StrSplit(context, ". ", absl::SkipEmpty())) {
    std::vector<std::string> words = absl::StrSplit(sentence, ' ', absl::SkipEmpty());
    if (words.size() >= 4 && words[0] == person) place = words.back();
  }
  if (!place.empty() && place.back() == '.') place.pop_back();
  return place;
}

TEST_CASE("shared-prefix contexts come near the asked length, short ones by cutting stories",
          "[cpu]") {
  auto tokenizer = Tokenizer::FromFile(testing::SharedPath("models/stories260K/tokenizer.json"));
  REQUIRE(tokenizer.ok());
  const std::string babi = testing::SharedPath("data/babi/qa1_single-supporting-fact_dev.txt");
  for (int budget : {100, 450}) {
    INFO("context_tokens " << budget);
    SharedPrefixOptions o;
    o.contexts = 12;
    o.questions_per_context = 3;
    o.context_tokens = budget;
    auto w = BuildBabiSharedPrefixWorkload(babi, **tokenizer, o);
    REQUIRE(w.ok());
    REQUIRE(w->size() == 12);
    for (const SharedPrefixContext& c : *w) {
      // A cut story may be up to 25% over; filler stops past the budget by a statement.
      CHECK(c.context_tokens <= budget * 5 / 4 + 20);
      CHECK(c.context_tokens >= budget * 0.6);
      REQUIRE(c.questions.size() == 3);
      for (const SharedPrefixQuestion& q : c.questions) {
        CHECK(q.prompt.rfind(c.context, 0) == 0);
        const std::string person = q.prompt.substr(q.prompt.rfind("Where is ") + 9);
        CHECK(LastPlace(c.context, person.substr(0, person.find('?'))) == q.answer);
      }
    }
  }
}

TEST_CASE("the shared-prefix workload loads with a checkpoint directory's tokenizer", "[cpu]") {
  const std::string model = testing::SharedPath("models/stories260K");
  const std::string babi = testing::SharedPath("data/babi/qa1_single-supporting-fact_dev.txt");
  SharedPrefixOptions o;
  o.contexts = 4;
  auto tokenizer = Tokenizer::FromFile(model + "/tokenizer.json");
  REQUIRE(tokenizer.ok());
  auto built = BuildBabiSharedPrefixWorkload(babi, **tokenizer, o);
  auto loaded = LoadBabiSharedPrefixWorkload(babi, model, o);
  REQUIRE(built.ok());
  REQUIRE(loaded.ok());
  REQUIRE(loaded->size() == built->size());
  for (size_t i = 0; i < built->size(); ++i) {
    CHECK((*loaded)[i].context == (*built)[i].context);
    CHECK((*loaded)[i].context_tokens == (*built)[i].context_tokens);
  }
  // A directory without a tokenizer is a clear error, not an empty workload.
  auto missing = LoadBabiSharedPrefixWorkload(babi, testing::SharedPath("data/babi"), o);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("tokenizer.json"));
}

}  // namespace
}  // namespace scd::e2e
