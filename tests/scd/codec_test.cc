// The codec end to end on the real checkpoints: every mode rebuilds a consumer cache from
// which generation continues; baselines without drift (producer == consumer) reproduce the
// oracle within their quantisation error; on the fine-tuned pair, calibrated SCD moves the
// consumer measurably closer to its oracle than raw reuse; the pair handshake refuses
// payloads and artifacts made for other models.
#include "common/scd/codec.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "common/runtime/generate.h"
#include "common/scd/calibration.h"
#include "tests/scd/scd_fixtures.h"
#include "tests/test_support.h"

namespace scd {
using testing::Cpu;
using testing::Load;
using testing::SampledPassages;

TEST_CASE("Baselines without drift reproduce the oracle within quantisation error", "[cpu]") {
  auto model = Load("models/stories260K");
  auto backend = Cpu(model);
  auto passages = SampledPassages(*backend, 6, 80, 100);
  struct Want {
    CodecMode mode;
    double max_kl;
  };
  // Same model on both sides: only the encoding loses information.
  for (Want w : {Want{CodecMode::kOracle, 1e-9}, Want{CodecMode::kRaw, 1e-4},
                 Want{CodecMode::kQuant8, 2e-3}, Want{CodecMode::kQuant4, 0.1}}) {
    auto s = ScoreCodec(*backend, *backend, nullptr, w.mode, {}, passages);
    INFO(std::string(CodecModeName(w.mode)) << ": " << s.status());
    REQUIRE(s.ok());
    INFO("kl " << s->kl << " top1 " << s->top1);
    CHECK(s->kl <= w.max_kl);
  }
}

TEST_CASE("Calibrated SCD beats raw reuse on the fine-tuned pair; handshakes hold", "[cpu][slow]") {
  auto producer_model = Load("models/stories260K");
  auto consumer_model = Load("models/stories260K-babi-qa");
  auto producer = Cpu(producer_model);
  auto consumer = Cpu(consumer_model);
  auto artifact = std::make_unique<ScdArtifact>(testing::BundledQuickArtifact());
  const std::string path = testing::TempDir() + "/pair.safetensors";
  REQUIRE(artifact->Save(path).ok());
  auto loaded = ScdArtifact::Load(path);
  REQUIRE(loaded.ok());
  auto shared = std::make_shared<const ScdArtifact>(std::move(loaded).value());
  CHECK(shared->patch_order.size() == 5);
  CHECK(shared->report["selection"].size() == 5);
  CHECK(shared->recompute_end - shared->recompute_first == 1);

  auto held = SampledPassages(*producer, 10, 96, 9000);
  auto raw = ScoreCodec(*producer, *consumer, shared, CodecMode::kRaw, {}, held);
  auto scd = ScoreCodec(*producer, *consumer, shared, CodecMode::kScd, {}, held);
  auto recompute = ScoreCodec(*producer, *consumer, shared, CodecMode::kRecompute, {}, held);
  REQUIRE(raw.ok());
  REQUIRE(scd.ok());
  REQUIRE(recompute.ok());
  INFO("raw kl " << raw->kl << " scd kl " << scd->kl << " recompute kl " << recompute->kl);
  CHECK(scd->kl < raw->kl);
  CHECK(recompute->kl < raw->kl);

  // Payload size: scd with int8 codes is a fraction of raw F16.
  auto enc = ProducerCodec::Create(producer_model, consumer_model->digest(), shared).value();
  PrefillResult states;
  auto seq = producer->NewSequence(128).value();
  REQUIRE(producer->Prefill(*seq, held[0], ProducerPrefillOptions(CodecMode::kRecompute), &states)
              .ok());
  const size_t raw_bytes =
      SerializePayload(enc->Encode(CodecMode::kRaw, held[0], states).value()).size();
  const size_t scd_bytes =
      SerializePayload(enc->Encode(CodecMode::kScd, held[0], states).value()).size();
  CHECK(scd_bytes < 0.4 * raw_bytes);

  // Handshakes: another consumer refuses the artifact and the pair's payloads.
  auto wiki = Load("models/stories260K-wiki");
  auto refused = ConsumerCodec::Create(wiki, "", shared);
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  auto wiki_raw = ConsumerCodec::Create(wiki, producer_model->digest(), nullptr).value();
  auto wiki_backend = Cpu(wiki);
  auto wseq = wiki_backend->NewSequence(128).value();
  const Payload p = enc->Encode(CodecMode::kRaw, held[0], states).value();
  auto st = wiki_raw->Rebuild(p, *wiki_backend, *wseq);
  CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(wseq->length() == 0);
  CHECK(!ProducerCodec::Create(wiki, consumer_model->digest(), shared).ok());
}

}  // namespace scd
