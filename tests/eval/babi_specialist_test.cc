// End-to-end check of the bAbI prompt format against the bundled specialist: its NLL on qa1
// dev transcripts must match the README (0.23 nats/token), and greedy answers to the default
// prompts must mostly be right. A wrong separator or answer cue fails here first.
#include <catch2/catch.hpp>

#include "common/eval/answer.h"
#include "common/eval/babi.h"
#include "common/eval/metrics.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/test_support.h"

namespace scd::eval {
namespace {

TEST_CASE("specialist reproduces its README NLL and answers default-format prompts", "[cpu]") {
  const std::string dir = testing::SharedPath("models/stories260K-babi-qa");
  auto model = LoadModel(dir);
  REQUIRE(model.ok());
  auto backend = CreateBackend(BackendKind::kCpu, *model);
  REQUIRE(backend.ok());
  auto tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
  REQUIRE(tokenizer.ok());
  auto stories = ReadBabiFiles(testing::SharedPath("data/babi/qa1_single-supporting-fact_dev.txt"));
  REQUIRE(stories.ok());

  // Transcript NLL over the first 20 stories (the whole file measures 0.227).
  double total_nll = 0;
  int64_t scored = 0;
  for (int s = 0; s < 20; ++s) {
    const std::vector<int32_t> ids =
        (*tokenizer)->Encode(MakeBabiStoryView((*stories)[s]).transcript, true);
    auto seq = (*backend)->NewSequence(static_cast<int>(ids.size()));
    REQUIRE(seq.ok());
    PrefillOptions options;
    options.surprisal = true;
    PrefillResult result;
    REQUIRE((*backend)->Prefill(**seq, ids, options, &result).ok());
    for (size_t i = 1; i < ids.size(); ++i) total_nll += result.surprisal[i];
    scored += static_cast<int64_t>(ids.size()) - 1;
  }
  const double nll = total_nll / scored;
  INFO("specialist NLL on 20 qa1 dev transcripts: " << nll);
  CHECK(nll > 0.15);
  CHECK(nll < 0.30);

  // Greedy answers on the first 50 questions (measured EM 0.52 on the first 100).
  BabiOptions options;
  options.max_examples = 50;
  QaAggregate scores;
  for (const BabiExample& ex : MakeBabiExamples(*stories, options)) {
    auto answer =
        GenerateGreedyAnswer(**backend, **tokenizer, (*tokenizer)->Encode(ex.prompt, true), 8);
    REQUIRE(answer.ok());
    CHECK(answer->generated_tokens <= 8);
    scores.Add(ScoreAnswer(answer->answer, ex.answer));
  }
  INFO("EM " << scores.em.mean() << " F1 " << scores.f1.mean());
  CHECK(scores.em.count() == 50);
  CHECK(scores.em.mean() >= 0.35);
}

}  // namespace
}  // namespace scd::eval
