// PayloadChunks: a payload rebuilt a chunk of rows at a time leaves the consumer's cache as
// the whole payload's rebuild leaves it, in every mode that rebuilds (raw, KIVI int8 and
// int4, recompute, scd-reuse, scd), on the calibrated bundled pair: the suffix prefilled on
// top gives the same logits at every position. Chunks are the requested size rounded to the
// payload's granularity; a payload for another pair fails at its first chunk, untouched.
// The codec's own blocks on the host (CodecOptions::cpu_block_rows, inside one Rebuild) leave
// the same cache too, and a KvCaptureBackend (the SEKV path's) captures every block's rows in
// order: the whole rebuild's K/V.
#include "common/serving/payload_chunks.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "common/scd/payload_rows.h"
#include "common/sekv/kv_capture_backend.h"
#include "tests/scd/scd_fixtures.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using testing::Cpu;
using testing::Load;

// A KvCaptureBackend that counts the codec's AppendKv calls (its blocks).
class CountingCapture : public sekv::KvCaptureBackend {
 public:
  using KvCaptureBackend::KvCaptureBackend;
  absl::Status AppendKv(Sequence& seq, const ExternalKv& kv) override {
    ++appends;
    return KvCaptureBackend::AppendKv(seq, kv);
  }
  int appends = 0;
};

double LargestDifference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

// The consumer's logits at every suffix position, after `rebuild` filled `seq`.
std::vector<float> SuffixLogits(Backend& consumer, Sequence& seq,
                                const std::vector<int32_t>& suffix) {
  PrefillOptions o;
  o.all_logits = true;
  PrefillResult r;
  REQUIRE(consumer.Prefill(seq, suffix, o, &r).ok());
  return r.logits;
}

// The calibrated bundled pair with a producer and two consumer codecs (the default one and one
// that rebuilds in host blocks of 20 rows), and a 139-token prompt: the payload covers its
// first 130 tokens, the consumer prefills the last 10.
struct ChunkPair {
  ChunkPair();

  std::shared_ptr<const Model> producer_model = Load("models/stories260K");
  std::shared_ptr<const Model> consumer_model = Load("models/stories260K-babi-qa");
  std::unique_ptr<Backend> producer = Cpu(producer_model);
  std::unique_ptr<Backend> consumer = Cpu(consumer_model);
  std::shared_ptr<const ScdArtifact> artifact;
  std::unique_ptr<ProducerCodec> enc;
  std::unique_ptr<ConsumerCodec> dec, blocked;
  std::vector<int32_t> prompt, context, suffix;
  PrefillResult states;
};

ChunkPair::ChunkPair() {
  artifact = std::make_shared<const ScdArtifact>(testing::QuickArtifact(*producer, *consumer));
  REQUIRE(artifact->recompute_end > artifact->recompute_first);
  enc = ProducerCodec::Create(producer_model, consumer_model->digest(), artifact).value();
  dec = ConsumerCodec::Create(consumer_model, producer_model->digest(), artifact).value();
  CodecOptions in_blocks;
  in_blocks.cpu_block_rows = 20;
  blocked =
      ConsumerCodec::Create(consumer_model, producer_model->digest(), artifact, in_blocks).value();
  prompt = testing::SampledPassages(*producer, 1, 139, 31)[0];
  context.assign(prompt.begin(), prompt.end() - 10);  // 130 rows
  suffix.assign(prompt.end() - 10, prompt.end());
  auto seq = producer->NewSequence(static_cast<int>(context.size())).value();
  REQUIRE(producer->Prefill(*seq, context, ProducerPrefillOptions(CodecMode::kRecompute), &states)
              .ok());
}

// The whole payload rebuilt at once: the K/V it captures and the suffix's logits on top.
struct WholeRebuild {
  ExternalKv kv;
  std::vector<float> logits;
};

WholeRebuild RebuildWhole(ChunkPair& f, const Payload& payload) {
  auto whole_seq = f.consumer->NewSequence(static_cast<int>(f.prompt.size())).value();
  CountingCapture whole_capture(*f.consumer);
  REQUIRE(f.dec->Rebuild(payload, whole_capture, *whole_seq).ok());
  CHECK(whole_capture.appends == 1);  // 130 rows: far below the default block
  WholeRebuild whole;
  whole.kv = whole_capture.TakeCaptured();
  whole.logits = SuffixLogits(*f.consumer, *whole_seq, f.suffix);
  return whole;
}

// The codec's blocks of 20 rows (KIVI: 32, their group); recompute payloads stay whole. The
// captured K/V and the suffix's logits are the whole rebuild's within `bound`.
void CheckCodecBlocks(ChunkPair& f, CodecMode mode, const Payload& payload,
                      const WholeRebuild& whole, double bound) {
  const bool kivi = mode == CodecMode::kQuant8 || mode == CodecMode::kQuant4;
  auto seq = f.consumer->NewSequence(static_cast<int>(f.prompt.size())).value();
  CountingCapture capture(*f.consumer);
  RebuildStats stats;
  REQUIRE(f.blocked->Rebuild(payload, capture, *seq, &stats).ok());
  CHECK(seq->length() == static_cast<int>(f.context.size()));
  const size_t block = mode == CodecMode::kRecompute ? 130 : kivi ? 32 : 20;
  CHECK(f.blocked->HostBlockRows(payload) == block);
  CHECK(f.dec->HostBlockRows(payload) == 130);
  CHECK(capture.appends == (mode == CodecMode::kRecompute ? 1 : kivi ? 5 : 7));
  CHECK(stats.decode_seconds > 0);
  const ExternalKv kv = capture.TakeCaptured();
  CHECK(capture.captured().num_tokens == 0);
  REQUIRE(kv.num_tokens == whole.kv.num_tokens);
  REQUIRE(kv.k_pre_rope.size() == whole.kv.k_pre_rope.size());
  for (size_t l = 0; l < kv.k_pre_rope.size(); ++l) {
    INFO("layer " << l);
    CHECK(LargestDifference(kv.k_pre_rope[l], whole.kv.k_pre_rope[l]) <= bound);
    CHECK(LargestDifference(kv.v[l], whole.kv.v[l]) <= bound);
  }
  const double worst = LargestDifference(SuffixLogits(*f.consumer, *seq, f.suffix), whole.logits);
  INFO("codec blocks: largest logit difference " << worst);
  CHECK(worst <= bound);
}

// The engine's chunks of 20 rows, rounded to the payload's granularity: the suffix's logits
// are the whole rebuild's within `bound` (recompute: 2e-4, its attention split by chunks).
void CheckEngineChunks(ChunkPair& f, CodecMode mode, const Payload& payload,
                       const WholeRebuild& whole, double bound) {
  const bool kivi = mode == CodecMode::kQuant8 || mode == CodecMode::kQuant4;
  PayloadChunks chunks(payload);
  // KIVI keys split at their group (CodecOptions::kivi_group, 32); the others anywhere.
  CHECK(chunks.granularity() == (kivi ? 32u : 1u));
  REQUIRE(chunks.remaining() == f.context.size());
  auto seq = f.consumer->NewSequence(static_cast<int>(f.prompt.size())).value();
  std::vector<size_t> rows;
  while (chunks.remaining() > 0) {
    const auto n = chunks.Advance(*f.dec, *f.consumer, *seq, 20);
    INFO(n.status());
    REQUIRE(n.ok());
    rows.push_back(*n);
    CHECK(seq->length() == static_cast<int>(f.context.size() - chunks.remaining()));
  }
  CHECK(rows == (kivi ? std::vector<size_t>{32, 32, 32, 32, 2}
                      : std::vector<size_t>{20, 20, 20, 20, 20, 20, 10}));
  CHECK(chunks.Advance(*f.dec, *f.consumer, *seq, 20).value() == 0);
  const double worst = LargestDifference(SuffixLogits(*f.consumer, *seq, f.suffix), whole.logits);
  INFO("engine chunks: largest logit difference " << worst);
  CHECK(worst <= (mode == CodecMode::kRecompute ? 2e-4 : bound));
}

// A sequence too short for the payload, a negative block and a payload for another pair are
// refused before anything lands; an oracle payload has nothing to rebuild.
void CheckChunkRefusals(ChunkPair& f) {
  // A sequence too short for the payload is refused before any block lands in it.
  {
    const Payload raw = f.enc->Encode(CodecMode::kRaw, f.context, f.states).value();
    auto short_seq = f.consumer->NewSequence(static_cast<int>(f.context.size()) - 1).value();
    CHECK(f.blocked->Rebuild(raw, *f.consumer, *short_seq).code() == absl::StatusCode::kOutOfRange);
    CHECK(short_seq->length() == 0);
  }
  // A negative block is refused.
  CodecOptions negative;
  negative.cpu_block_rows = -1;
  CHECK(ConsumerCodec::Create(f.consumer_model, f.producer_model->digest(), f.artifact, negative)
            .status()
            .code() == absl::StatusCode::kInvalidArgument);

  // A payload made for another pair fails at its first chunk and leaves the sequence empty.
  auto wiki = Load("models/stories260K-wiki");
  auto wiki_backend = Cpu(wiki);
  auto wiki_codec = ConsumerCodec::Create(wiki, f.producer_model->digest(), nullptr).value();
  PayloadChunks foreign(f.enc->Encode(CodecMode::kRaw, f.context, f.states).value());
  auto wseq = wiki_backend->NewSequence(static_cast<int>(f.prompt.size())).value();
  CHECK(foreign.Advance(*wiki_codec, *wiki_backend, *wseq, 20).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(wseq->length() == 0);
  CHECK(foreign.remaining() == f.context.size());
  // An oracle payload has nothing to rebuild: its tokens are prefilled.
  CHECK(PayloadChunks(f.enc->Encode(CodecMode::kOracle, f.context, f.states).value()).remaining() ==
        0);
}

}  // namespace

TEST_CASE(
    "A payload rebuilt in engine chunks or codec blocks leaves the cache its whole rebuild leaves",
    "[cpu]") {
  ChunkPair f;
  for (const CodecMode mode : {CodecMode::kRaw, CodecMode::kQuant8, CodecMode::kQuant4,
                               CodecMode::kRecompute, CodecMode::kScdReuse, CodecMode::kScd}) {
    INFO(CodecModeName(mode));
    const Payload payload = f.enc->Encode(mode, f.context, f.states).value();
    const WholeRebuild whole = RebuildWhole(f, payload);
    // The same bytes rebuilt row by row; only the GEMMs' blocking (and, for recompute, the
    // block's attention split by chunks) may round differently.
    const bool kivi = mode == CodecMode::kQuant8 || mode == CodecMode::kQuant4;
    const bool per_row = mode == CodecMode::kRaw || kivi;  // decoded row by row, no GEMM
    const double bound = per_row ? 0.0 : 2e-4;
    CheckCodecBlocks(f, mode, payload, whole, bound);
    CheckEngineChunks(f, mode, payload, whole, bound);
  }
  CheckChunkRefusals(f);
}

}  // namespace scd
