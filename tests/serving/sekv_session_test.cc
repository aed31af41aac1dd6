// The decode engine's SEKV path (sekv_session.h): requests with payloads in every supported
// mode are served through the SEKV cache within the GPU budget, batched next to each other;
// the hierarchy is built from the same K/V and surprisal as the offline path, in chunks as in
// one piece; unsupported payloads fail alone with the reason; hierarchies are built and freed
// off the engine loop. What SEKV requests reserve and wait for is sekv_admission_test.cc's.
#include "common/serving/sekv_session.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "common/scd/wire_format.h"
#include "common/sekv/kv_cache.h"
#include "common/serving/decode_engine.h"
#include "tests/serving/engine_fixture.h"
#include "tests/serving/sekv_fixture.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using testing::DecodeEventCollector;
using testing::Ended;
using testing::Gate;
using testing::Job;
using testing::SekvFixture;
using testing::SyntheticPrompt;
using testing::TokensOf;
using testing::WaitUntil;

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

TEST_CASE("SEKV requests decode together in one step, each with the tokens it gets alone",
          "[cpu]") {
  SekvFixture f;
  // The four builds are held until all four have begun, and again until all four are done
  // (their prompts differ in length, and a loaded machine may run one far behind the others),
  // so that they end together; the steps are paced (23 of them take 230 ms or more), so each
  // request is still decoding when the last of them is taken up, however the threads run.
  Gate begun, built;
  std::atomic<int> builds{0}, done{0};
  DecodeEngineOptions o = SekvFixture::Options(0.4);
  o.sekv.before_build = [&] {
    if (builds.fetch_add(1) == 3) begun.Open();
    begun.Hold();
  };
  o.sekv.after_build = [&] {
    if (done.fetch_add(1) == 3) built.Open();
    built.Hold();
  };
  o.min_step_interval = absl::Milliseconds(10);
  auto engine = f.ProducerFixture::Engine(o);
  DecodeEventCollector ev;
  const int kTokens = 24;
  for (uint64_t id = 1; id <= 4; ++id) {
    REQUIRE(engine->Submit(Job(id, 50 + 15 * static_cast<int>(id), kTokens), ev.For(id)).ok());
  }
  ev.WaitFor(4);
  CHECK(done.load() == 4);  // each build held at its end (SekvServingOptions::after_build)
  const DecodeEngineStats s = engine->stats();
  CHECK(s.sekv_max_step_rows == 4);
  // Each request's first token comes from its last prompt token's step (SekvSession::Activate),
  // every other one from a batched step.
  CHECK(s.sekv_step_rows == 4 * (kTokens - 1));
  CHECK(s.sekv_steps < s.sekv_step_rows);
  auto idle = f.Engine(0.4);
  for (uint64_t id = 1; id <= 4; ++id) {
    INFO("request " << id);
    REQUIRE(ev.final_events[id].kind == DecodeEvent::Kind::kDone);
    REQUIRE(ev.tokens[id].size() == static_cast<size_t>(kTokens));
    DecodeEventCollector alone;
    REQUIRE(idle->Submit(Job(id, 50 + 15 * static_cast<int>(id), kTokens), alone.For(id)).ok());
    alone.WaitFor(1);
    CHECK(alone.tokens[id] == ev.tokens[id]);
  }
  CHECK(idle->stats().sekv_max_step_rows == 1);
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
  auto codec = ConsumerCodec::Create(f.model, f.model->digest(), nullptr).value();
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

namespace {

// Rows rebuilt from the payload (every mode but oracle), in chunks of 16 rows rounded to the
// payload's granularity: 1 for raw F16, KIVI keys' group of 32 for quant4.
void CheckRebuildChunks(SekvPrefill& chunked, CodecMode mode, bool with_payload) {
  const size_t rebuilt = with_payload && mode != CodecMode::kOracle ? 100 : 0;
  REQUIRE(chunked.rebuild_remaining() == rebuilt);
  if (rebuilt > 0) {  // the rows come first
    CHECK(chunked.Advance(16).status().code() == absl::StatusCode::kFailedPrecondition);
  }
  std::vector<size_t> rows;
  while (chunked.rebuild_remaining() > 0) {
    const auto n = chunked.AdvanceRebuild(16);
    REQUIRE(n.ok());
    rows.push_back(*n);
  }
  if (mode == CodecMode::kRaw) {
    CHECK(rows == std::vector<size_t>{16, 16, 16, 16, 16, 16, 4});
  } else if (mode == CodecMode::kQuant4) {
    CHECK(rows == std::vector<size_t>{32, 32, 32, 4});
  } else {
    CHECK(rows.empty());
  }
}

// Tokens the consumer prefills itself, in chunks of 16 that never span the oracle payload's
// end: an oracle payload's 100, then the suffix but its last token.
void CheckPrefillChunks(SekvPrefill& chunked, size_t payload_own, size_t head) {
  REQUIRE(chunked.remaining() == payload_own + head);
  std::vector<size_t> pieces;
  while (chunked.remaining() > 0) {
    const auto n = chunked.Advance(16);
    REQUIRE(n.ok());
    pieces.push_back(*n);
  }
  const size_t expected_pieces = (payload_own + 15) / 16 + (head + 15) / 16;
  CHECK(pieces.size() == expected_pieces);
  CHECK(*std::max_element(pieces.begin(), pieces.end()) == 16);
}

// The chunks' prompt is the one piece's: the same last token, surprisal within 1e-3 and K/V
// within 1e-4 (a payload's rows: the same bytes rebuilt).
void CheckSamePrompt(const SekvPrompt& got, const SekvPrompt& whole) {
  REQUIRE(got.kv.num_tokens == whole.kv.num_tokens);
  CHECK(got.last_token == whole.last_token);
  REQUIRE(got.surprisal.size() == whole.surprisal.size());
  for (size_t i = 0; i < got.surprisal.size(); ++i) {
    INFO("position " << i);
    CHECK(got.surprisal[i] == Approx(whole.surprisal[i]).margin(1e-3));
  }
  REQUIRE(got.kv.k_pre_rope.size() == whole.kv.k_pre_rope.size());
  double worst = 0;
  for (size_t l = 0; l < got.kv.k_pre_rope.size(); ++l) {
    REQUIRE(got.kv.k_pre_rope[l].size() == whole.kv.k_pre_rope[l].size());
    REQUIRE(got.kv.v[l].size() == whole.kv.v[l].size());
    for (size_t i = 0; i < got.kv.k_pre_rope[l].size(); ++i) {
      worst =
          std::max(worst, std::abs(double(got.kv.k_pre_rope[l][i]) - whole.kv.k_pre_rope[l][i]));
      worst = std::max(worst, std::abs(double(got.kv.v[l][i]) - whole.kv.v[l][i]));
    }
  }
  CHECK(worst < 1e-4);
}

}  // namespace

TEST_CASE("A SEKV prompt rebuilt and prefilled in chunks gives what one piece gives", "[cpu]") {
  SekvFixture f;
  auto backend = CreateBackend(BackendKind::kCpu, f.model).value();
  auto codec = ConsumerCodec::Create(f.model, f.model->digest(), nullptr).value();
  const auto prompt = SyntheticPrompt(150, 11);
  const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + 100);
  const auto suffix = absl::MakeConstSpan(prompt).subspan(100);  // 49 tokens to prefill, + 1
  for (const CodecMode mode : {CodecMode::kOracle, CodecMode::kRaw, CodecMode::kQuant4}) {
    for (const bool with_payload : {true, false}) {
      if (!with_payload && mode != CodecMode::kOracle) continue;
      INFO("payload " << (with_payload ? CodecModeName(mode) : "none"));
      const Payload payload = f.Encode(mode, prefix);
      const Payload* p = with_payload ? &payload : nullptr;
      const auto whole_suffix = with_payload ? suffix : absl::MakeConstSpan(prompt);
      auto whole = SekvSession::Prepare(*backend, *codec, p, whole_suffix);
      REQUIRE(whole.ok());
      auto chunked = SekvPrefill::Begin(
          *backend, *codec, p != nullptr ? std::optional<Payload>(*p) : std::nullopt, whole_suffix);
      REQUIRE(chunked.ok());
      CheckRebuildChunks(**chunked, mode, with_payload);
      const size_t payload_own = with_payload && mode == CodecMode::kOracle ? 100 : 0;
      CheckPrefillChunks(**chunked, payload_own, whole_suffix.size() - 1);
      const SekvPrompt got = (*chunked)->Take();
      CheckSamePrompt(got, *whole);
      // Each part's time is its own: the rebuild (or an oracle payload's prefill), the suffix.
      CHECK((with_payload ? got.times.rebuild_ms > 0 : got.times.rebuild_ms == 0));
      CHECK(got.times.suffix_prefill_ms > 0);
    }
  }
  // Advance asks for at least one token, AdvanceRebuild for at least one row.
  auto p = SekvPrefill::Begin(*backend, *codec, std::nullopt, absl::MakeConstSpan(prompt));
  REQUIRE(p.ok());
  CHECK((*p)->Advance(0).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK((*p)->AdvanceRebuild(0).status().code() == absl::StatusCode::kInvalidArgument);
}

namespace {

// 200 prompt tokens, 199 in the cache before the build: prefilled, or 192 rows rebuilt from a
// raw payload and the suffix's 7 prefilled.
DecodeJob LongPromptJob(SekvFixture& f, bool with_payload) {
  const std::vector<int32_t> prompt = SyntheticPrompt(200, 2);
  DecodeJob long_prompt;
  long_prompt.request_id = 2;
  if (with_payload) {
    long_prompt.payload = SerializePayload(
        f.Encode(CodecMode::kRaw, std::vector<int32_t>(prompt.begin(), prompt.begin() + 192)));
    long_prompt.suffix.assign(prompt.begin() + 192, prompt.end());
  } else {
    long_prompt.suffix = prompt;
  }
  long_prompt.max_tokens = 6;
  long_prompt.stop_ids = {-1};
  return long_prompt;
}

// The long prompt (request 2) served beside a running request (1): its tokens, the running
// request's tokens between Submit's return and the start of the long prompt's hierarchy build
// (right after its prefill), and the engine's counters over it.
struct LongPromptRun {
  std::vector<int32_t> tokens;
  size_t meanwhile = 0;
  DecodeEngineStats before, after;
};

LongPromptRun RunLongPrompt(SekvFixture& f, bool with_payload, int chunk) {
  DecodeEventCollector ev;
  std::atomic<int> builds{0};
  std::atomic<size_t> at_build{0};
  DecodeEngineOptions o;
  o.sekv.enabled = true;
  o.sekv.budget = 0.4;
  o.prefill_chunk = chunk;
  o.rebuild_chunk = chunk;
  // Steps of 5 ms at least: the build's thread, which counts the running request's tokens,
  // may start a few tiny steps late on a loaded machine.
  o.min_step_interval = absl::Milliseconds(5);
  o.sekv.before_build = [&] {
    if (builds.fetch_add(1) == 1) at_build = TokensOf(ev, 1);
  };
  auto engine = f.ProducerFixture::Engine(o);
  DecodeJob running;
  running.request_id = 1;
  running.suffix = SyntheticPrompt(40, 1);
  running.max_tokens = 400;
  running.stop_ids = {-1};
  REQUIRE(engine->Submit(std::move(running), ev.For(1)).ok());
  REQUIRE(WaitUntil([&] { return TokensOf(ev, 1) >= 2; }));
  DecodeJob long_prompt = LongPromptJob(f, with_payload);
  LongPromptRun run;
  run.before = engine->stats();
  // Counted from Submit's return: Submit parses the payload first, on this thread, while
  // the running request keeps decoding.
  REQUIRE(engine->Submit(std::move(long_prompt), ev.For(2)).ok());
  const size_t before = TokensOf(ev, 1);
  {
    std::unique_lock<std::mutex> lock(ev.mu);
    REQUIRE(ev.cv.wait_for(lock, std::chrono::seconds(60),
                           [&] { return ev.final_events.count(2) == 1; }));
  }
  engine->Cancel(1);
  ev.WaitFor(2);
  REQUIRE(ev.final_events[2].kind == DecodeEvent::Kind::kDone);
  CHECK(ev.tokens[2].size() == 6);
  CHECK(engine->starting() == 0);
  run.tokens = ev.tokens[2];
  run.meanwhile = at_build.load() - before;
  run.after = engine->stats();
  return run;
}

}  // namespace

TEST_CASE(
    "A long SEKV prompt is prefilled, a long payload rebuilt, in chunks between the running "
    "requests' steps",
    "[cpu]") {
  SekvFixture f;
  for (const bool with_payload : {false, true}) {
    std::vector<int32_t> tokens_at_chunk16;
    for (const int chunk : {16, 0}) {
      INFO((with_payload ? "raw payload" : "no payload")
           << ", prefill_chunk and rebuild_chunk " << chunk);
      const LongPromptRun run = RunLongPrompt(f, with_payload, chunk);
      const size_t meanwhile = run.meanwhile;
      INFO(meanwhile << " tokens of the running request during the long prompt's prefill");
      const long prefills = run.after.prefill_chunks - run.before.prefill_chunks;
      const long rebuilds = run.after.rebuild_chunks - run.before.rebuild_chunks;
      if (chunk > 0) {
        // No payload: 13 prefills, one per loop iteration, a decode step after each of the
        // first 12. A raw payload: 12 rebuilds of 16 rows, the last iteration's with the
        // suffix's prefill; a decode step after each of the first 11.
        CHECK(prefills == (with_payload ? 1 : 13));
        CHECK(rebuilds == (with_payload ? 12 : 0));
        CHECK(meanwhile >= (with_payload ? 9u : 10u));  // one may come before Submit returns
        tokens_at_chunk16 = run.tokens;
      } else {
        CHECK(prefills == 1);
        CHECK(rebuilds == (with_payload ? 1 : 0));
        CHECK(meanwhile <= 2);
        CHECK(run.tokens == tokens_at_chunk16);  // chunked or not, the same tokens
      }
      CHECK(run.after.rebuild_rows - run.before.rebuild_rows == (with_payload ? 192 : 0));
      CHECK(run.after.prefill_tokens - run.before.prefill_tokens == (with_payload ? 7 : 199));
    }
  }
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
  Gate gate;
  std::atomic<int> builds{0}, held{0}, releases{0};
  DecodeEngineOptions o = SekvFixture::Options(0.4);
  o.sekv.before_release = [&] { ++releases; };
  o.sekv.before_build = [&] {
    if (builds.fetch_add(1) == 0) return;
    ++held;
    gate.Hold();
  };
  auto engine = f.ProducerFixture::Engine(o);
  DecodeEventCollector ev;
  REQUIRE(engine->Submit(Job(1, 60, 300), ev.For(1)).ok());
  REQUIRE(WaitUntil([&] { return TokensOf(ev, 1) >= 2; }));
  REQUIRE(engine->Submit(Job(2, 70, 5), ev.For(2)).ok());
  REQUIRE(engine->Submit(Job(3, 50, 5), ev.For(3)).ok());
  REQUIRE(WaitUntil([&] { return held.load() == 2; }));
  // Both builds are held: request 1 goes on, and they count as active.
  const size_t before = TokensOf(ev, 1);
  CHECK(WaitUntil([&] { return TokensOf(ev, 1) >= before + 8; }));
  CHECK(engine->running() == 3);
  // A request cancelled during its build ends now, even with nothing else to step.
  REQUIRE(WaitUntil([&] { return Ended(ev, 1); }));
  engine->Cancel(3);
  CHECK(WaitUntil([&] { return Ended(ev, 3); }));
  gate.Open();
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
  REQUIRE(idle->Submit(Job(2, 70, 5), alone.For(2)).ok());
  alone.WaitFor(1);
  CHECK(alone.tokens[2] == ev.tokens[2]);
  CHECK(engine->stats().sekv_requests == 2);
  // Every hierarchy built is freed through the engine's releasing thread: requests 1 and 2
  // when they finished, and request 3's, built for a request that had ended, when its build
  // came in.
  engine.reset();
  CHECK(releases.load() == 3);
}

TEST_CASE("A finished SEKV request's hierarchy is freed off the engine loop", "[cpu]") {
  SekvFixture f;
  // The first release is held until the test lets it go: freed on the loop thread, it would
  // stall request 1 (and this test) until then.
  Gate gate;
  std::atomic<int> releases{0}, held{0};
  DecodeEngineOptions o = SekvFixture::Options(0.4);
  o.sekv.before_release = [&] {
    if (releases.fetch_add(1) > 0) return;
    ++held;
    gate.Hold();
  };
  auto engine = f.ProducerFixture::Engine(o);
  DecodeEventCollector ev;
  REQUIRE(engine->Submit(Job(1, 60, 400), ev.For(1)).ok());
  REQUIRE(WaitUntil([&] { return TokensOf(ev, 1) >= 2; }));
  REQUIRE(engine->Submit(Job(2, 50, 4), ev.For(2)).ok());
  REQUIRE(WaitUntil([&] { return Ended(ev, 2) && held.load() == 1; }));
  // Request 2's release is held: request 1 goes on, and a new request is built, decoded and
  // finished meanwhile.
  const size_t before = TokensOf(ev, 1);
  CHECK(WaitUntil([&] { return TokensOf(ev, 1) >= before + 8; }));
  REQUIRE(engine->Submit(Job(3, 40, 3), ev.For(3)).ok());
  CHECK(WaitUntil([&] { return Ended(ev, 3); }));
  CHECK(held.load() == 1);
  engine->Cancel(1);
  gate.Open();
  ev.WaitFor(3);
  for (uint64_t id : {2, 3}) {
    INFO("request " << id);
    REQUIRE(ev.final_events[id].kind == DecodeEvent::Kind::kDone);
    CHECK(ev.tokens[id].size() == (id == 2 ? 4u : 3u));
  }
  CHECK(ev.final_events[1].error.code() == absl::StatusCode::kCancelled);
  engine.reset();  // frees what is still queued
  CHECK(releases.load() == 3);
}

}  // namespace scd