// The decode engine's SEKV path (sekv_session.h): requests with payloads in every supported
// mode are served through the SEKV cache within the GPU budget, batched next to each other;
// the hierarchy is built from the same K/V and surprisal as the offline path; unsupported
// payloads fail alone with the reason.
#include "common/serving/sekv_session.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

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

TEST_CASE("SEKV hierarchies build off the engine loop, which keeps decoding the others", "[cpu]") {
  SekvFixture f;
  // Every build after the first is held until the test releases it: a build on the loop
  // thread would stall request 1 (and this test) until then.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> builds{0}, held{0};
  DecodeEngineOptions o;
  o.sekv.enabled = true;
  o.sekv.budget = 0.4;
  o.sekv.before_build = [&] {
    if (builds.fetch_add(1) == 0) return;
    ++held;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return release; });
  };
  auto engine = f.ProducerFixture::Engine(o);
  DecodeEventCollector ev;
  auto tokens_of = [&](uint64_t id) {
    std::lock_guard<std::mutex> lock(ev.mu);
    return ev.tokens[id].size();
  };
  auto wait_until = [](const std::function<bool()>& ok) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ok() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return ok();
  };
  auto job = [](uint64_t id, int prompt_tokens, int max_tokens) {
    DecodeJob j;
    j.request_id = id;
    j.suffix = SyntheticPrompt(prompt_tokens, static_cast<int>(id));
    j.max_tokens = max_tokens;
    j.stop_ids = {-1};
    return j;
  };
  REQUIRE(engine->Submit(job(1, 60, 300), ev.For(1)).ok());
  REQUIRE(wait_until([&] { return tokens_of(1) >= 2; }));
  REQUIRE(engine->Submit(job(2, 70, 5), ev.For(2)).ok());
  REQUIRE(engine->Submit(job(3, 50, 5), ev.For(3)).ok());
  REQUIRE(wait_until([&] { return held.load() == 2; }));
  // Both builds are held: request 1 goes on, and they count as active.
  const size_t before = tokens_of(1);
  CHECK(wait_until([&] { return tokens_of(1) >= before + 8; }));
  CHECK(engine->running() == 3);
  // A request cancelled during its build ends now, even with nothing else to step.
  REQUIRE(wait_until([&] {
    std::lock_guard<std::mutex> lock(ev.mu);
    return ev.final_events.count(1) == 1;
  }));
  engine->Cancel(3);
  CHECK(wait_until([&] {
    std::lock_guard<std::mutex> lock(ev.mu);
    return ev.final_events.count(3) == 1;
  }));
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  ev.WaitFor(3);
  CHECK(ev.final_events[3].error.code() == absl::StatusCode::kCancelled);
  CHECK(ev.tokens[3].empty());
  for (uint64_t id : {1, 2}) {
    INFO("request " << id);
    REQUIRE(ev.final_events[id].kind == DecodeEvent::Kind::kDone);
    CHECK(ev.tokens[id].size() == (id == 1 ? 300u : 5u));
    CHECK(ev.final_events[id].timings.sekv_build_ms > 0);
  }
  // Request 2 built on the side gives what the same request gives on an idle engine.
  auto idle = f.Engine(0.4);
  DecodeEventCollector alone;
  REQUIRE(idle->Submit(job(2, 70, 5), alone.For(2)).ok());
  alone.WaitFor(1);
  CHECK(alone.tokens[2] == ev.tokens[2]);
  CHECK(engine->stats().sekv_requests == 2);
}

}  // namespace scd
