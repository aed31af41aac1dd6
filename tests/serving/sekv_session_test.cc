// The decode engine's SEKV path (sekv_session.h): requests with payloads in every supported
// mode are served through the SEKV cache within the GPU budget, batched next to each other;
// the hierarchy is built from the same K/V and surprisal as the offline path; unsupported
// payloads fail alone with the reason.
#include "common/serving/sekv_session.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "common/scd/wire_format.h"
#include "common/sekv/kv_cache.h"
#include "common/serving/decode_engine.h"
#include "tests/serving/engine_fixture.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using testing::DecodeEventCollector;
using testing::SyntheticPrompt;

struct SekvFixture : testing::ProducerFixture {
  std::unique_ptr<DecodeEngine> Engine(double budget) {
    DecodeEngineOptions o;
    o.sekv.enabled = true;
    o.sekv.budget = budget;
    return ProducerFixture::Engine(o);
  }
};

}  // namespace

TEST_CASE("SEKV engine serves batched requests within the GPU budget", "[cpu]") {
  SekvFixture f;
  auto engine = f.Engine(0.4);
  DecodeEventCollector ev;
  const CodecMode modes[] = {CodecMode::kRaw, CodecMode::kQuant8, CodecMode::kOracle,
                             CodecMode::kRaw};
  for (uint64_t id = 1; id <= 4; ++id) {
    const auto prompt = SyntheticPrompt(120 + 20 * static_cast<int>(id), static_cast<int>(id));
    DecodeJob job;
    job.request_id = id;
    job.payload = SerializePayload(
        f.Encode(modes[id - 1], std::vector<int32_t>(prompt.begin(), prompt.end() - 3)));
    job.suffix.assign(prompt.end() - 3, prompt.end());
    job.max_tokens = 6;
    job.stop_ids = {-1};
    REQUIRE(engine->Submit(std::move(job), ev.For(id)).ok());
  }
  DecodeJob bare;  // no payload: the consumer prefills the whole prompt itself
  bare.request_id = 5;
  bare.suffix = SyntheticPrompt(90, 5);
  bare.max_tokens = 6;
  bare.stop_ids = {-1};
  REQUIRE(engine->Submit(std::move(bare), ev.For(5)).ok());
  ev.WaitFor(5);
  for (uint64_t id = 1; id <= 5; ++id) {
    INFO("request " << id);
    const DecodeEvent& done = ev.final_events[id];
    REQUIRE(done.kind == DecodeEvent::Kind::kDone);
    CHECK(done.finish_reason == "length");
    CHECK(ev.tokens[id].size() == 6);
    // The stages of SekvSession::Start: a payload's rebuild (none without a payload), the
    // prefill of the rest with the last token's step, and the hierarchy's build.
    const DecodeTimings& t = done.timings;
    CHECK(t.sekv_build_ms > 0);
    CHECK(t.suffix_prefill_ms > 0);
    CHECK((id == 5 ? t.rebuild_ms == 0 : t.rebuild_ms > 0));
    CHECK(t.rebuild_ms + t.suffix_prefill_ms + t.sekv_build_ms <= t.first_token_ms);
  }
  const DecodeEngineStats s = engine->stats();
  CHECK(s.sekv_requests == 5);
  REQUIRE(s.sekv_full_kv_bytes > 0);
  CHECK(s.sekv_gpu_bytes / s.sekv_full_kv_bytes <= 0.40);
  CHECK(s.sekv_gpu_bytes / s.sekv_full_kv_bytes >= 0.25);
  CHECK(s.sekv_cpu_bytes > 0);
}

TEST_CASE("SEKV session builds the hierarchy from the payload's K/V and surprisal", "[cpu]") {
  SekvFixture f;
  const auto prompt = SyntheticPrompt(150, 7);
  const std::vector<int32_t> prefix(prompt.begin(), prompt.end() - 4);
  const Payload payload = f.Encode(CodecMode::kRaw, prefix);
  auto surprisal = PayloadSurprisal(payload);
  REQUIRE(surprisal.ok());
  REQUIRE(surprisal->size() == prefix.size());
  auto backend = CreateBackend(BackendKind::kCpu, f.model).value();
  auto codec = ConsumerCodec::Create(f.model, f.model->digest, nullptr).value();
  auto decoder = sekv::SekvDecoder::Create(f.model).value();
  SekvServingOptions o;
  o.enabled = true;
  o.budget = 0.4;
  std::vector<float> logits;
  auto s = SekvSession::Start(*backend, *codec, *decoder, &payload,
                              absl::MakeConstSpan(prompt).last(4), o, &logits);
  REQUIRE(s.ok());
  CHECK((*s)->length() == static_cast<int>(prompt.size()));
  CHECK(logits.size() == static_cast<size_t>(f.model->config.vocab_size));
  // The segmentation covers the payload and the suffix but its last token, and its anchors
  // come from the producer's surprisal over the payload part.
  const sekv::Segmentation& seg = (*s)->cache().segmentation();
  CHECK(seg.num_tokens == static_cast<int>(prompt.size()) - 1);
  for (size_t i = 1; i < seg.anchors.size(); ++i) {
    const int a = seg.anchors[i];
    if (a < static_cast<int>(prefix.size())) CHECK((*surprisal)[a] > seg.threshold - 0.01f);
  }
  const sekv::MemoryBreakdown m = (*s)->memory();
  CHECK(m.gpu_ratio() <= 0.40);
  CHECK(m.pinned > 0);
  // The first logits come from the cache: close to the full cache's on the same rebuilt K/V.
  std::vector<float> full_logits;
  {
    auto seq = f.reference->NewSequence(static_cast<int>(prompt.size())).value();
    PrefillResult pr;
    REQUIRE(f.reference->Prefill(*seq, prompt, PrefillOptions{}, &pr).ok());
    full_logits = pr.logits;
  }
  int argmax_s = 0, argmax_f = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > logits[argmax_s]) argmax_s = static_cast<int>(i);
    if (full_logits[i] > full_logits[argmax_f]) argmax_f = static_cast<int>(i);
  }
  CHECK(argmax_s == argmax_f);
}

TEST_CASE("SEKV refuses what it cannot serve, one request at a time", "[cpu]") {
  SekvFixture f;
  auto engine = f.Engine(0.4);
  DecodeEventCollector ev;
  const auto prompt = SyntheticPrompt(80, 3);
  const std::vector<int32_t> prefix(prompt.begin(), prompt.end() - 1);
  // A payload without its surprisal block.
  Payload stripped = f.Encode(CodecMode::kRaw, prefix);
  stripped.blocks.erase(
      std::remove_if(stripped.blocks.begin(), stripped.blocks.end(),
                     [](const PayloadBlock& b) { return b.kind == BlockKind::kSurprisal; }),
      stripped.blocks.end());
  DecodeJob a;
  a.request_id = 1;
  a.payload = SerializePayload(stripped);
  a.suffix = {prompt.back()};
  REQUIRE(engine->Submit(std::move(a), ev.For(1)).ok());
  DecodeJob good;
  good.request_id = 2;
  good.payload = SerializePayload(f.Encode(CodecMode::kRaw, prefix));
  good.suffix = {prompt.back()};
  good.max_tokens = 3;
  good.stop_ids = {-1};
  REQUIRE(engine->Submit(std::move(good), ev.For(2)).ok());
  ev.WaitFor(2);
  REQUIRE(ev.final_events[1].kind == DecodeEvent::Kind::kError);
  CHECK(ev.final_events[1].error.code() == absl::StatusCode::kNotFound);
  CHECK(ev.final_events[2].kind == DecodeEvent::Kind::kDone);
  CHECK(ev.tokens[2].size() == 3);
}

}  // namespace scd
