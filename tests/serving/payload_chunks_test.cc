// PayloadChunks: a payload rebuilt a chunk of rows at a time leaves the consumer's cache as
// the whole payload's rebuild leaves it, in every mode that rebuilds (raw, KIVI int8 and
// int4, recompute, scd-reuse, scd), on the calibrated bundled pair: the suffix prefilled on
// top gives the same logits at every position. Chunks are the requested size rounded to the
// payload's granularity; a payload for another pair fails at its first chunk, untouched.
#include "common/serving/payload_chunks.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "common/scd/payload_rows.h"
#include "tests/scd/scd_fixtures.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using testing::Cpu;
using testing::Load;

// The consumer's logits at every suffix position, after `rebuild` filled `seq`.
std::vector<float> SuffixLogits(Backend& consumer, Sequence& seq,
                                const std::vector<int32_t>& suffix) {
  PrefillOptions o;
  o.all_logits = true;
  PrefillResult r;
  REQUIRE(consumer.Prefill(seq, suffix, o, &r).ok());
  return r.logits;
}

}  // namespace

TEST_CASE("A payload rebuilt in chunks leaves the cache its whole rebuild leaves, every mode",
          "[cpu]") {
  auto producer_model = Load("models/stories260K");
  auto consumer_model = Load("models/stories260K-babi-qa");
  auto producer = Cpu(producer_model);
  auto consumer = Cpu(consumer_model);
  auto artifact = std::make_shared<const ScdArtifact>(testing::QuickArtifact(*producer, *consumer));
  REQUIRE(artifact->recompute_end > artifact->recompute_first);
  auto enc = ProducerCodec::Create(producer_model, consumer_model->digest, artifact).value();
  auto dec = ConsumerCodec::Create(consumer_model, producer_model->digest, artifact).value();
  const std::vector<int32_t> prompt = testing::SampledPassages(*producer, 1, 139, 31)[0];
  const std::vector<int32_t> context(prompt.begin(), prompt.end() - 10);  // 130 rows
  const std::vector<int32_t> suffix(prompt.end() - 10, prompt.end());
  PrefillResult states;
  {
    auto seq = producer->NewSequence(static_cast<int>(context.size())).value();
    REQUIRE(producer->Prefill(*seq, context, ProducerPrefillOptions(CodecMode::kRecompute), &states)
                .ok());
  }
  for (const CodecMode mode : {CodecMode::kRaw, CodecMode::kQuant8, CodecMode::kQuant4,
                               CodecMode::kRecompute, CodecMode::kScdReuse, CodecMode::kScd}) {
    INFO(CodecModeName(mode));
    const Payload payload = enc->Encode(mode, context, states).value();
    auto whole_seq = consumer->NewSequence(static_cast<int>(prompt.size())).value();
    REQUIRE(dec->Rebuild(payload, *consumer, *whole_seq).ok());
    const std::vector<float> want = SuffixLogits(*consumer, *whole_seq, suffix);

    PayloadChunks chunks(payload);
    // KIVI keys split at their group (CodecOptions::kivi_group, 32); the others anywhere.
    const bool kivi = mode == CodecMode::kQuant8 || mode == CodecMode::kQuant4;
    CHECK(chunks.granularity() == (kivi ? 32u : 1u));
    REQUIRE(chunks.remaining() == context.size());
    auto seq = consumer->NewSequence(static_cast<int>(prompt.size())).value();
    std::vector<size_t> rows;
    while (chunks.remaining() > 0) {
      const auto n = chunks.Advance(*dec, *consumer, *seq, 20);
      INFO(n.status());
      REQUIRE(n.ok());
      rows.push_back(*n);
      CHECK(seq->length() == static_cast<int>(context.size() - chunks.remaining()));
    }
    CHECK(rows == (kivi ? std::vector<size_t>{32, 32, 32, 32, 2}
                        : std::vector<size_t>{20, 20, 20, 20, 20, 20, 10}));
    CHECK(chunks.Advance(*dec, *consumer, *seq, 20).value() == 0);
    const std::vector<float> got = SuffixLogits(*consumer, *seq, suffix);
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    INFO("largest logit difference " << worst);
    // The same bytes rebuilt row by row; only the GEMMs' blocking (and, for recompute, the
    // block's attention split by chunks) may round differently.
    CHECK(worst < 2e-4);
  }

  // A payload made for another pair fails at its first chunk and leaves the sequence empty.
  auto wiki = Load("models/stories260K-wiki");
  auto wiki_backend = Cpu(wiki);
  auto wiki_codec = ConsumerCodec::Create(wiki, producer_model->digest, nullptr).value();
  PayloadChunks foreign(enc->Encode(CodecMode::kRaw, context, states).value());
  auto wseq = wiki_backend->NewSequence(static_cast<int>(prompt.size())).value();
  CHECK(foreign.Advance(*wiki_codec, *wiki_backend, *wseq, 20).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(wseq->length() == 0);
  CHECK(foreign.remaining() == context.size());
  // An oracle payload has nothing to rebuild: its tokens are prefilled.
  CHECK(PayloadChunks(enc->Encode(CodecMode::kOracle, context, states).value()).remaining() == 0);
}

}  // namespace scd
