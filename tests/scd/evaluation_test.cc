// The evaluation driver on real bAbI questions: the oracle row reproduces answers computed
// independently by plain greedy generation on the full prompt; payload accounting is
// consistent (raw is 1.0 of itself, oracle ships ids only, int8 SCD codes are a fraction);
// and the Markdown/CSV/PNG reports are written.
#include "common/scd/evaluation.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "common/eval/answer.h"
#include "common/eval/babi.h"
#include "common/eval/metrics.h"
#include "tests/scd/scd_fixtures.h"

namespace scd {

TEST_CASE("Evaluator rows are consistent with independent generation", "[cpu][slow]") {
  auto pm = testing::Load("models/stories260K");
  auto cm = testing::Load("models/stories260K-babi-qa");
  auto producer = testing::Cpu(pm);
  auto consumer = testing::Cpu(cm);
  auto artifact = std::make_shared<const ScdArtifact>(testing::QuickArtifact(*producer, *consumer));
  auto tokenizer =
      Tokenizer::FromFile(testing::SharedPath("models/stories260K-babi-qa/tokenizer.json"));
  REQUIRE(tokenizer.ok());
  auto ev = Evaluator::Create(*producer, *consumer, artifact, **tokenizer);
  REQUIRE(ev.ok());

  EvalConfig cfg;
  cfg.modes = {CodecMode::kOracle, CodecMode::kRaw, CodecMode::kQuant4, CodecMode::kScd};
  cfg.babi_files = testing::SharedPath("data/babi/qa1_single-supporting-fact_dev.txt");
  cfg.max_examples = 20;
  cfg.text_file = testing::SharedPath("data/tinystories_dev.txt");
  cfg.text_passages = 4;
  cfg.timing_tokens = 64;
  cfg.timing_reps = 1;
  auto reports = (*ev)->Run(cfg);
  INFO(reports.status());
  REQUIRE(reports.ok());
  REQUIRE(reports->size() == 4);
  const ModeReport& oracle = (*reports)[0];
  const ModeReport& raw = (*reports)[1];
  const ModeReport& q4 = (*reports)[2];
  const ModeReport& scd = (*reports)[3];
  CHECK(oracle.examples == 20);

  // Independent oracle: greedy answers from the consumer on the whole prompt.
  eval::BabiOptions bo;
  bo.max_examples = 20;
  auto examples = eval::LoadBabiExamples(cfg.babi_files, bo);
  REQUIRE(examples.ok());
  eval::QaAggregate direct;
  for (const auto& ex : *examples) {
    auto a = eval::GenerateGreedyAnswer(*consumer, **tokenizer, (*tokenizer)->Encode(ex.prompt), 8);
    REQUIRE(a.ok());
    direct.Add(eval::ScoreAnswer(a->answer, ex.answer));
  }
  CHECK(oracle.em == Approx(direct.em.mean()));
  CHECK(oracle.f1 == Approx(direct.f1.mean()));
  CHECK(oracle.kl == Approx(0.0).margin(1e-6));
  CHECK(oracle.top1 == Approx(1.0));

  CHECK(raw.payload_ratio_vs_raw == Approx(1.0));
  CHECK(oracle.payload_ratio_vs_raw < 0.02);
  CHECK(q4.payload_ratio_vs_raw < 0.4);
  CHECK(scd.payload_ratio_vs_raw < 0.4);
  CHECK(scd.payload_bytes_per_token < raw.payload_bytes_per_token);
  CHECK(raw.kl > 0.0);  // the fine-tuned consumer really drifts from the producer
  for (const ModeReport& r : *reports) {
    CHECK(r.rebuild_ms > 0);
    CHECK(r.consumer_prefill_ms > 0);
    CHECK(r.long_prefill_ms > 0);
    CHECK(r.ppl > 1.0);
  }

  const std::string prefix = testing::TempDir() + "/eval";
  REQUIRE(WriteEvalTables(*reports, prefix, "test").ok());
  for (const char* ext : {".md", ".csv", ".png"}) {
    CHECK(std::filesystem::file_size(prefix + ext) > 100);
  }
  const std::string md = testing::ReadFileOrFail(prefix + ".md");
  CHECK(md.find("scd") != std::string::npos);
}

}  // namespace scd
