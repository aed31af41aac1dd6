// Tests for corpus reading (blank-line passages, WikiText lines) and the half split used by
// the producer-covers-first-half perplexity protocol.
#include "common/eval/text_corpus.h"

#include <catch2/catch.hpp>
#include <fstream>

#include "common/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace scd::eval {
namespace {

TEST_CASE("blank-line passages and WikiText lines", "[cpu]") {
  const char text[] = "First line.\nSecond line.\n\n\n  Next passage.  \r\n\nx\n\nLast";
  auto passages = SplitPassages(text);
  CHECK(passages ==
        std::vector<std::string>{"First line.\nSecond line.", "Next passage.", "x", "Last"});
  CorpusOptions options;
  options.min_chars = 2;
  options.max_passages = 2;
  CHECK(SplitPassages(text, options) ==
        std::vector<std::string>{"First line.\nSecond line.", "Next passage."});

  const char wiki[] = " = Title = \n A sentence , with spaces . \n\n = = Section = = \n More .\n";
  CorpusOptions lines;
  lines.format = CorpusFormat::kLines;
  CHECK(SplitPassages(wiki, lines) ==
        std::vector<std::string>{"A sentence , with spaces .", "More ."});
  lines.skip_headings = false;
  CHECK(SplitPassages(wiki, lines).size() == 4);
}

TEST_CASE("bundled corpora passage counts", "[cpu]") {
  auto stories = ReadPassages(testing::SharedPath("data/tinystories_dev.txt"));
  REQUIRE(stories.ok());
  CHECK(stories->size() == 500);
  CHECK(stories->front().rfind("Once upon a time, there was a little bunny named Benny.", 0) == 0);
  CorpusOptions lines;
  lines.format = CorpusFormat::kLines;
  auto wiki = ReadPassages(testing::SharedPath("data/wikitext2_dev.txt"), lines);
  REQUIRE(wiki.ok());
  CHECK(wiki->size() == 235);  // 334 non-blank lines, 99 of them headings
  CorpusOptions capped;
  capped.max_passages = 3;
  const std::string both = testing::SharedPath("data/tinystories_dev.txt") + "," +
                           testing::SharedPath("data/tinystories_calib.txt");
  auto few = ReadPassages(both, capped);
  REQUIRE(few.ok());
  CHECK(few->size() == 3);
  CHECK(ReadPassages(testing::TempDir() + "/missing.txt").status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("half split", "[cpu]") {
  const std::vector<int32_t> ids = {1, 10, 11, 12, 13, 14, 15};
  auto split = SplitInHalves(ids, 0);
  REQUIRE(split.ok());
  CHECK(split->prefix_length == 3);
  CHECK(std::vector<int32_t>(split->prefix().begin(), split->prefix().end()) ==
        std::vector<int32_t>{1, 10, 11});
  CHECK(std::vector<int32_t>(split->continuation().begin(), split->continuation().end()) ==
        std::vector<int32_t>{12, 13, 14, 15});
  CHECK(split->num_scored() == 4);
  auto truncated = SplitInHalves(ids, 4);
  REQUIRE(truncated.ok());
  CHECK(truncated->tokens == std::vector<int32_t>{1, 10, 11, 12});
  CHECK(truncated->prefix_length == 2);
  CHECK(!SplitInHalves(std::vector<int32_t>{1}, 0).ok());
}

TEST_CASE("passage splits from the tokenizer", "[cpu]") {
  auto tokenizer = Tokenizer::FromFile(testing::SharedPath("models/stories260K/tokenizer.json"));
  REQUIRE(tokenizer.ok());
  const std::vector<std::string> passages = {
      "Once upon a time, there was a little dog. The dog liked to run in the park.", "Hi.",
      "Tom had a big red ball. He threw it to his friend Sue, and she laughed."};
  SplitOptions options;
  options.max_tokens = 16;
  options.min_tokens = 8;
  auto splits = MakePassageSplits(**tokenizer, passages, options);
  REQUIRE(splits.ok());
  REQUIRE(splits->size() == 2);  // "Hi." is too short
  CHECK((*splits)[0].passage_index == 0);
  CHECK((*splits)[1].passage_index == 2);
  for (const PassageSplit& s : *splits) {
    CHECK(s.tokens.size() == 16);
    CHECK(s.tokens.front() == (*tokenizer)->bos_id());
    CHECK(s.prefix_length == 8);
    CHECK(s.num_scored() == 8);
  }
  options.max_passages = 1;
  CHECK(MakePassageSplits(**tokenizer, passages, options)->size() == 1);
}

}  // namespace
}  // namespace scd::eval
