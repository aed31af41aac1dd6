// DecodeEngine: generation through a payload equals plain generation; concurrent requests are
// batched and each still gets its own exact output; queue limits, cancellation, deadlines and
// corrupt payloads each end one request with a clear error while the engine keeps serving.
#include "common/serving/decode_engine.h"

#include <catch2/catch.hpp>
#include <thread>

#include "common/base/host_memory.h"
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

// A job of a `prompt`-token synthetic prompt (its content seeded by `id`), no payload.
DecodeJob PromptJob(uint64_t id, int prompt, int max_tokens) {
  DecodeJob job;
  job.request_id = id;
  job.suffix = SyntheticPrompt(prompt, static_cast<int>(id));
  job.max_tokens = max_tokens;
  return job;
}

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

namespace {

// A long-running request (id 1, stop ids none) submitted to `f` and running on return.
void StartBlocker(Fixture& f, Collector& c, const DecodeCallback& callback) {
  DecodeJob blocker;
  blocker.request_id = 1;
  blocker.suffix = SyntheticPrompt(8, 9);
  blocker.max_tokens = 300;
  blocker.stop_ids = {-1};
  REQUIRE(f.engine->Submit(std::move(blocker), callback).ok());
  for (int i = 0; i < 5000; ++i) {
    {
      std::lock_guard<std::mutex> lock(c.mu);
      if (!c.tokens[1].empty()) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL("the long-running request never started");
}

// Request 2: a 152-token prompt, its first 150 tokens as a payload in `mode` (an oracle
// payload's the consumer prefills; others it rebuilds), the last 2 as the suffix.
DecodeJob LongJob(Fixture& f, int max_tokens, std::vector<int32_t>* prompt,
                  CodecMode mode = CodecMode::kOracle) {
  *prompt = SyntheticPrompt(152, 3);
  const std::vector<int32_t> prefix(prompt->begin(), prompt->end() - 2);
  DecodeJob job;
  job.request_id = 2;
  job.payload = SerializePayload(f.Encode(mode, prefix));
  job.suffix.assign(prompt->end() - 2, prompt->end());
  job.max_tokens = max_tokens;
  return job;
}

}  // namespace

TEST_CASE(
    "On the CPU backend the default KV budget is kv_memory_fraction of the host's available "
    "memory",
    "[cpu]") {
  const int64_t row = static_cast<int64_t>(testing::ProducerFixture().reference->SequenceBytes(1));
  int reads = 0;
  auto options = [&](double fraction, absl::StatusOr<int64_t> available) {
    DecodeEngineOptions o;
    o.kv_memory_fraction = fraction;
    o.host_memory_now = [&reads, available]() {
      ++reads;
      return available;
    };
    return o;
  };
  // The CPU backend has no device memory: half of the 180 positions' worth the host has. A
  // request of 91 positions could never fit; one of 90 runs.
  {
    Fixture f(options(0.5, 180 * row));
    CHECK(reads == 1);
    const DecodeEngineStats s = f.engine->stats();
    CHECK(s.kv_budget_bytes == 90 * row);
    CHECK(s.kv_budget_of_host);
    Collector c;
    const absl::Status refused = f.engine->Submit(PromptJob(1, 11, 80), c.For(1));  // 91 positions
    CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
    CHECK(refused.message().find("whole KV budget") != std::string_view::npos);
    DecodeJob fits = PromptJob(2, 10, 80);
    fits.stop_ids = {-1};
    REQUIRE(f.engine->Submit(std::move(fits), c.For(2)).ok());
    c.WaitFor(1);
    CHECK(c.final_events[2].kind == DecodeEvent::Kind::kDone);
    CHECK(c.tokens[2].size() == 80);
  }
  // A budget given wins, and the host is not read.
  DecodeEngineOptions given = options(0.9, 100 * row);
  given.kv_budget_bytes = 12345;
  {
    Fixture f(given);
    CHECK(f.engine->stats().kv_budget_bytes == 12345);
    CHECK(!f.engine->stats().kv_budget_of_host);
    CHECK(reads == 1);
  }
  // Fraction 0, or a host whose memory is unknown: no limit. Nothing left: nothing admitted.
  CHECK(Fixture(options(0, 100 * row)).engine->stats().kv_budget_bytes == 0);
  CHECK(reads == 1);
  CHECK(Fixture(options(0.9, absl::UnimplementedError("not Linux")))
            .engine->stats()
            .kv_budget_bytes == 0);
  CHECK(Fixture(options(0.9, int64_t{0})).engine->stats().kv_budget_bytes == 1);
  // A host that cannot be read stops the engine, saying why and which key asked.
  auto unreadable = testing::ProducerFixture().TryEngine(
      options(0.9, absl::InvalidArgumentError("no MemAvailable")));
  REQUIRE(!unreadable.ok());
  CHECK(unreadable.status().message().find("engine.kv_memory_fraction") != std::string_view::npos);
  CHECK(unreadable.status().message().find("no MemAvailable") != std::string_view::npos);
  // On this machine: 0.9 of what it has now.
  absl::StatusOr<int64_t> available = HostMemoryAvailable();
  const int64_t budget = Fixture().engine->stats().kv_budget_bytes;
  if (available.ok()) {
    CHECK(static_cast<double>(budget) ==
          Approx(0.9 * static_cast<double>(*available)).epsilon(0.2));
  } else {
    CHECK(budget == 0);
  }
}

TEST_CASE(
    "With a KV budget, requests are admitted as their caches fit; the rest wait in order, and "
    "one that could never fit is refused",
    "[cpu]") {
  auto probe = testing::ProducerFixture().reference->SequenceBytes(1);
  REQUIRE(probe > 0);
  const auto bytes = [&](int capacity) { return static_cast<int64_t>(probe) * capacity; };
  DecodeEngineOptions o;
  // Room for the blocker (8 + 300 positions) and one request of 20 + 20 beside it.
  o.kv_budget_bytes = bytes(308) + bytes(40);
  o.min_step_interval = absl::Milliseconds(1);  // the blocker runs for 300 ms or more
  Fixture f(o);
  Collector c;
  CHECK(f.engine->stats().kv_budget_bytes == o.kv_budget_bytes);
  const absl::Status refused = f.engine->Submit(PromptJob(50, 8, 400), c.For(50));  // 408 positions
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.message().find("whole KV budget") != std::string_view::npos);

  // The six requests and their expected tokens first, so that they are submitted while the
  // blocker runs however slow this machine is.
  std::map<uint64_t, std::vector<int32_t>> want;
  std::vector<DecodeJob> jobs;
  for (uint64_t id = 2; id <= 7; ++id) {
    const auto prompt = SyntheticPrompt(20, static_cast<int>(id));
    want[id] = f.Expected(prompt, 20);
    DecodeJob job;
    job.request_id = id;
    job.payload = f.Payload(std::vector<int32_t>(prompt.begin(), prompt.end() - 2));
    job.suffix.assign(prompt.end() - 2, prompt.end());
    job.max_tokens = 20;
    job.stop_ids = {-1};
    jobs.push_back(std::move(job));
  }
  StartBlocker(f, c, c.For(1));
  CHECK(f.engine->stats().kv_reserved_bytes == bytes(308));
  for (DecodeJob& job : jobs) {  // all at once: each waits for the one before it
    const uint64_t id = job.request_id;
    REQUIRE(f.engine->Submit(std::move(job), c.For(id)).ok());
  }
  // Until requests 2-7 have ended, by their ids: on a loaded machine the blocker can end
  // first, and the count of final events can pass 6 between two looks.
  const auto ended = [&] {
    std::lock_guard<std::mutex> lock(c.mu);
    for (uint64_t id = 2; id <= 7; ++id) {
      if (c.final_events.count(id) == 0) return false;
    }
    return true;
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60 * testing::kSanitizerWaitFactor);
  int64_t most_reserved = 0;
  for (;;) {
    most_reserved = std::max(most_reserved, f.engine->stats().kv_reserved_bytes);
    if (ended()) break;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  f.engine->Cancel(1);
  c.WaitFor(7);
  for (uint64_t id = 2; id <= 7; ++id) {
    INFO("request " << id);
    REQUIRE(c.final_events[id].kind == DecodeEvent::Kind::kDone);
    CHECK(c.tokens[id] == want[id]);
  }
  const DecodeEngineStats s = f.engine->stats();
  CHECK(most_reserved <= o.kv_budget_bytes);
  CHECK(s.max_batch_seen == 2);  // the blocker and one other at a time
  CHECK(s.kv_waits >= 4);        // of requests 3-7, all but the first admitted beside it
  CHECK(s.failed == 0);
  f.engine->Drain();
  for (int i = 0; i < 1000 && f.engine->stats().kv_reserved_bytes != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(f.engine->stats().kv_reserved_bytes == 0);
}

TEST_CASE("A request waiting for KV memory still ends at its deadline or when cancelled", "[cpu]") {
  DecodeEngineOptions o;
  o.kv_budget_bytes =
      static_cast<int64_t>(testing::ProducerFixture().reference->SequenceBytes(308));
  o.min_step_interval = absl::Milliseconds(2);  // the blocker runs for 600 ms or more
  Fixture f(o);
  Collector c;
  StartBlocker(f, c, c.For(1));
  for (uint64_t id : {2, 3}) {
    DecodeJob waiting;  // as large as the blocker: it waits for it
    waiting.request_id = id;
    waiting.suffix = SyntheticPrompt(8, static_cast<int>(id));
    waiting.max_tokens = 300;
    if (id == 2) waiting.deadline = absl::Now() + absl::Milliseconds(100);
    REQUIRE(f.engine->Submit(std::move(waiting), c.For(id)).ok());
  }
  f.engine->Cancel(3);
  c.WaitFor(2);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    CHECK(c.final_events.count(1) == 0);  // both ended before the blocker gave its memory back
    CHECK(c.final_events[2].error.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(c.final_events[2].error.message() == "request deadline passed while queued");
    CHECK(c.final_events[3].error.code() == absl::StatusCode::kCancelled);
    CHECK(c.tokens[2].empty());
    CHECK(c.tokens[3].empty());
  }
  CHECK(f.engine->queued() == 0);
  CHECK(f.engine->stats().kv_waits >= 1);
  f.engine->Cancel(1);
  c.WaitFor(3);
  CHECK(f.engine->stats().cancelled == 2);
}

TEST_CASE(
    "A long prompt is prefilled, a long payload rebuilt, in chunks between the running "
    "requests' decode steps",
    "[cpu]") {
  for (const CodecMode mode : {CodecMode::kOracle, CodecMode::kRaw})
    for (const int chunk : {16, 0}) {
      INFO(CodecModeName(mode) << " payload, prefill_chunk and rebuild_chunk " << chunk);
      DecodeEngineOptions o;
      o.prefill_chunk = chunk;
      o.rebuild_chunk = chunk;
      Fixture f(o);
      Collector c;
      std::mutex mu;
      std::vector<uint64_t> order;  // the request of every token event, in the engine's order
      auto recorded = [&](uint64_t id) {
        DecodeCallback inner = c.For(id);
        return [&mu, &order, id, inner](const DecodeEvent& e) {
          if (e.kind == DecodeEvent::Kind::kToken) {
            std::lock_guard<std::mutex> lock(mu);
            order.push_back(id);
          }
          inner(e);
        };
      };
      // The long prompt and its reference first: on a slow run (sanitizers) the running
      // request could otherwise end before the long prompt arrives.
      std::vector<int32_t> prompt;
      DecodeJob job = LongJob(f, 10, &prompt, mode);
      const std::vector<int32_t> want = f.Expected(prompt, 10);
      StartBlocker(f, c, recorded(1));
      // Counted from Submit's return: Submit parses the payload first, on this thread, while
      // the running request keeps decoding (the loop never waits for it).
      REQUIRE(f.engine->Submit(std::move(job), recorded(2)).ok());
      size_t submitted_at = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        submitted_at = order.size();
      }
      c.WaitFor(1);
      f.engine->Cancel(1);
      c.WaitFor(2);
      const DecodeEvent& done = c.final_events[2];
      REQUIRE(done.kind == DecodeEvent::Kind::kDone);
      CHECK(c.tokens[2] == want);  // chunked or not, the same prompt gives the same tokens
      CHECK(done.prompt_tokens == 152);
      CHECK(done.timings.rebuild_ms > 0);  // the raw payload's rebuild, the oracle one's prefill
      CHECK(done.timings.suffix_prefill_ms > 0);
      // The running request's tokens between the long prompt's arrival and its first token.
      const size_t first = static_cast<size_t>(
          std::find(order.begin() + submitted_at, order.end(), 2) - order.begin());
      const long between = std::count(order.begin() + submitted_at, order.begin() + first, 1);
      INFO(between << " tokens of the running request meanwhile");
      const DecodeEngineStats s = f.engine->stats();
      const bool oracle = mode == CodecMode::kOracle;
      if (chunk > 0) {
        // 150 payload rows (rebuilt) or tokens (prefilled) in chunks of 16, the 2 suffix tokens
        // with the last 6 of them: ten loop iterations, a decode step after each of the first
        // nine (one may come before Submit has returned).
        CHECK(between >= 8);
        CHECK(s.prefill_chunks == 1 + (oracle ? 11 : 1));
        CHECK(s.rebuild_chunks == (oracle ? 0 : 10));
      } else {
        CHECK(between <= 2);  // the whole prompt in one iteration
        CHECK(s.prefill_chunks == 1 + (oracle ? 2 : 1));
        CHECK(s.rebuild_chunks == (oracle ? 0 : 1));
      }
      CHECK(s.rebuild_rows == (oracle ? 0 : 150));
      CHECK(s.prefill_tokens == 8 + (oracle ? 152 : 2));
    }
}

TEST_CASE(
    "A request cancelled or past its deadline during its chunked prefill or rebuild ends there",
    "[cpu]") {
  DecodeEngineOptions o;
  o.prefill_chunk = 16;
  o.rebuild_chunk = 16;
  o.min_step_interval = absl::Milliseconds(20);  // ten chunks then take 200 ms at least
  Fixture f(o);
  Collector c;
  StartBlocker(f, c, c.For(1));
  std::vector<int32_t> prompt;
  SECTION("cancelled") {
    REQUIRE(f.engine->Submit(LongJob(f, 10, &prompt), c.For(2)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    f.engine->Cancel(2);
    c.WaitFor(1);
    CHECK(c.final_events[2].error.code() == absl::StatusCode::kCancelled);
  }
  SECTION("deadline") {
    DecodeJob job = LongJob(f, 10, &prompt);
    job.deadline = absl::Now() + absl::Milliseconds(60);
    REQUIRE(f.engine->Submit(std::move(job), c.For(2)).ok());
    c.WaitFor(1);
    const absl::Status& error = c.final_events[2].error;
    CHECK(error.code() == absl::StatusCode::kDeadlineExceeded);
    CHECK(error.message().find("prefill") != std::string_view::npos);
  }
  SECTION("cancelled during the rebuild of a raw payload") {
    REQUIRE(f.engine->Submit(LongJob(f, 10, &prompt, CodecMode::kRaw), c.For(2)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    f.engine->Cancel(2);
    c.WaitFor(1);
    CHECK(c.final_events[2].error.code() == absl::StatusCode::kCancelled);
    CHECK(f.engine->stats().rebuild_chunks < 10);
    CHECK(f.engine->stats().rebuild_chunks > 0);
  }
  CHECK(f.engine->stats().prefill_chunks < 1 + 11);
  size_t before = 0;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    CHECK(c.tokens[2].empty());
    CHECK(c.final_events.count(1) == 0);  // the running request goes on
    before = c.tokens[1].size();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  {
    std::lock_guard<std::mutex> lock(c.mu);
    CHECK(c.tokens[1].size() > before);
  }
  f.engine->Cancel(1);
  c.WaitFor(2);
}

}  // namespace scd
