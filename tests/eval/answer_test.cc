// Tests for answer extraction from greedy continuations, on strings and on a token stream
// decoded by the bundled tokenizer.
#include "common/eval/answer.h"

#include <catch2/catch.hpp>

#include "common/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace scd::eval {
namespace {

TEST_CASE("answer is the continuation up to the first period or newline", "[cpu]") {
  CHECK(ExtractAnswer(" bathroom. Q: Where is") == "bathroom");
  CHECK(ExtractAnswer(" the garden\nJohn went") == "the garden");
  CHECK(ExtractAnswer("kitchen") == "kitchen");  // EOS or length before any '.'
  CHECK(ExtractAnswer("  office  ") == "office");
  CHECK(ExtractAnswer(".") == "");
  CHECK(ExtractAnswer("") == "");
  CHECK(ExtractAnswer(" hall\r\n") == "hall");
  CHECK(AnswerComplete(" bathroom."));
  CHECK_FALSE(AnswerComplete(" bath"));
}

TEST_CASE("AnswerCollector stops at the end of the answer", "[cpu]") {
  auto tokenizer = Tokenizer::FromFile(testing::SharedPath("models/stories260K/tokenizer.json"));
  REQUIRE(tokenizer.ok());
  const Tokenizer& tok = **tokenizer;
  // A continuation as the model would produce it after "A:".
  const std::vector<int32_t> ids = tok.Encode(" bathroom. Q: Where", false);
  REQUIRE(ids.size() > 3);
  AnswerCollector collector(tok);
  size_t pushed = 0;
  while (pushed < ids.size() && collector.Push(ids[pushed])) ++pushed;
  CHECK(collector.done());
  CHECK(pushed < ids.size() - 1);  // stopped at the '.', before "Q: Where"
  CHECK(collector.answer() == "bathroom");
  CHECK_FALSE(collector.Push(ids.back()));  // stays done

  AnswerCollector eos(tok);
  for (int32_t id : tok.Encode(" kitchen", false)) CHECK(eos.Push(id));
  CHECK_FALSE(eos.Push(tok.eos_id()));
  CHECK(eos.done());
  CHECK(eos.answer() == "kitchen");
}

}  // namespace
}  // namespace scd::eval
