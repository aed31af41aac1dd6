// DecodeEngine: generation through a payload equals plain generation; concurrent requests are
// batched and each still gets its own exact output; queue limits, cancellation, deadlines and
// corrupt payloads each end one request with a clear error while the engine keeps serving.
#include "common/serving/decode_engine.h"

#include <catch2/catch.hpp>
#include <thread>

#include "common/runtime/generate.h"
#include "common/scd/wire_format.h"
#include "tests/serving/engine_fixture.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using Collector = testing::DecodeEventCollector;
using testing::SyntheticPrompt;

struct Fixture : testing::ProducerFixture {
  std::unique_ptr<DecodeEngine> engine;

  explicit Fixture(const DecodeEngineOptions& options = {}) { engine = Engine(options); }

  // A raw payload for `prefix` made from the reference backend's states.
  std::vector<uint8_t> Payload(const std::vector<int32_t>& prefix) {
    return SerializePayload(Encode(CodecMode::kRaw, prefix));
  }

  std::vector<int32_t> Expected(const std::vector<int32_t>& prompt, int max_tokens) {
    GenerateOptions g;
    g.max_new_tokens = max_tokens;
    auto r = Generate(*reference, prompt, g);
    REQUIRE(r.ok());
    return r->tokens;
  }
};

}  // namespace

TEST_CASE("Concurrent requests are batched and each matches plain generation", "[cpu]") {
  Fixture f;
  Collector c;
  std::map<uint64_t, std::vector<int32_t>> want;
  std::vector<DecodeJob> jobs;
  for (uint64_t id = 1; id <= 6; ++id) {
    const auto prompt = SyntheticPrompt(10 + 7 * static_cast<int>(id), static_cast<int>(id));
    const int max_tokens = 5 + 4 * static_cast<int>(id);
    want[id] = f.Expected(prompt, max_tokens);
    DecodeJob job;
    job.request_id = id;
    const std::vector<int32_t> prefix(prompt.begin(), prompt.end() - 2);
    job.payload = f.Payload(prefix);
    job.suffix.assign(prompt.end() - 2, prompt.end());
    job.max_tokens = max_tokens;
    jobs.push_back(std::move(job));
  }
  // A long-running request first, so the six arrive while a batch is in flight.
  DecodeJob blocker;
  blocker.request_id = 100;
  blocker.suffix = SyntheticPrompt(8, 9);
  blocker.max_tokens = 300;
  blocker.stop_ids = {-1};
  REQUIRE(f.engine->Submit(std::move(blocker), c.For(100)).ok());
  for (int i = 0; i < 5000 && f.engine->running() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& job : jobs) {
    const uint64_t id = job.request_id;
    REQUIRE(f.engine->Submit(std::move(job), c.For(id)).ok());
  }
  c.WaitFor(7);
  for (uint64_t id = 1; id <= 6; ++id) {
    INFO("request " << id);
    const DecodeEvent& done = c.final_events[id];
    REQUIRE(done.kind == DecodeEvent::Kind::kDone);
    CHECK(c.tokens[id] == want[id]);
    CHECK(done.completion_tokens == static_cast<int>(want[id].size()));
    CHECK(done.prompt_tokens == 10 + 7 * static_cast<int>(id));
  }
  CHECK(f.engine->stats().max_batch_seen > 1);
  CHECK(f.engine->stats().completed == 7);
  CHECK(c.tokens[100].size() == 300);
}

TEST_CASE("Bad requests fail alone and the engine keeps serving", "[cpu]") {
  DecodeEngineOptions o;
  o.max_queue = 64;
  Fixture f(o);
  Collector c;
  const auto prompt = SyntheticPrompt(30, 1);
  const std::vector<int32_t> prefix(prompt.begin(), prompt.end() - 1);
  const std::vector<int32_t> suffix = {prompt.back()};

  DecodeJob corrupt;
  corrupt.request_id = 1;
  corrupt.payload = f.Payload(prefix);
  corrupt.payload[corrupt.payload.size() / 2] ^= 0x10;
  corrupt.suffix = suffix;
  REQUIRE(f.engine->Submit(std::move(corrupt), c.For(1)).ok());

  DecodeJob late;
  late.request_id = 2;
  late.suffix = suffix;
  late.deadline = absl::Now() - absl::Seconds(1);
  REQUIRE(f.engine->Submit(std::move(late), c.For(2)).ok());

  DecodeJob too_long;
  too_long.request_id = 3;
  too_long.suffix = SyntheticPrompt(600, 2);
  REQUIRE(f.engine->Submit(std::move(too_long), c.For(3)).ok());

  DecodeJob good;
  good.request_id = 4;
  good.payload = f.Payload(prefix);
  good.suffix = suffix;
  good.max_tokens = 12;
  REQUIRE(f.engine->Submit(std::move(good), c.For(4)).ok());
  c.WaitFor(4);
  CHECK(c.final_events[1].error.code() == absl::StatusCode::kInvalidArgument);
  CHECK(c.final_events[1].error.message().find("checksum") != absl::string_view::npos);
  CHECK(c.final_events[2].error.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(c.final_events[3].error.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c.final_events[4].kind == DecodeEvent::Kind::kDone);
  CHECK(c.tokens[4] == f.Expected(prompt, 12));

  DecodeJob empty;
  CHECK(f.engine->Submit(std::move(empty), c.For(9)).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Cancellation ends one request; a full queue refuses with RESOURCE_EXHAUSTED", "[cpu]") {
  DecodeEngineOptions o;
  o.max_batch = 1;
  o.max_queue = 1;
  Fixture f(o);
  Collector c;
  DecodeJob longer;
  longer.request_id = 1;
  longer.suffix = SyntheticPrompt(8, 3);
  longer.max_tokens = 400;
  longer.stop_ids = {-1};
  REQUIRE(f.engine->Submit(std::move(longer), c.For(1)).ok());
  // Wait until it runs, then fill the queue.
  for (int i = 0; i < 2000 && f.engine->running() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  DecodeJob queued;
  queued.request_id = 2;
  queued.suffix = SyntheticPrompt(8, 4);
  queued.max_tokens = 3;
  REQUIRE(f.engine->Submit(std::move(queued), c.For(2)).ok());
  DecodeJob overflow;
  overflow.request_id = 3;
  overflow.suffix = SyntheticPrompt(8, 5);
  CHECK(f.engine->Submit(std::move(overflow), c.For(3)).code() ==
        absl::StatusCode::kResourceExhausted);
  f.engine->Cancel(1);
  c.WaitFor(2);
  CHECK(c.final_events[1].error.code() == absl::StatusCode::kCancelled);
  CHECK(c.tokens[1].size() < 400);
  CHECK(c.final_events[2].kind == DecodeEvent::Kind::kDone);
  CHECK(c.tokens[2].size() == 3);
  f.engine->Drain();
  CHECK(f.engine->running() == 0);
}

}  // namespace scd
