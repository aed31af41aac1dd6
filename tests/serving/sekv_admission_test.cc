// Admission on the decode engine's SEKV path (sekv_session.h): SEKV requests wait for host
// memory (sekv.max_host_bytes, or sekv.host_memory_fraction of the host's available memory),
// reserving a bound on their build's peak and keeping what their hierarchy holds once built;
// on the CPU path a built request gives its KV reservation back where the host budget holds
// its hierarchy; plain requests pass a SEKV request that waits for host memory alone; prompts
// under sekv.min_prompt_tokens take the plain path and reserve no SEKV host memory.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <tuple>

#include "common/base/host_memory.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/kv_cache.h"
#include "common/serving/decode_engine.h"
#include "common/serving/sekv_session.h"
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

TEST_CASE(
    "SEKV requests wait for host memory (sekv.max_host_bytes), reserving a bound on their "
    "build's peak; once built, each keeps what its hierarchy holds, which is less",
    "[cpu]") {
  SekvFixture f;
  constexpr int kPrompt = 200, kMaxTokens = 40;
  // A request's reservation at admission: its prompt's K/V in F32 as its prefill captured it
  // (the 199 positions before its last token), the most a hierarchy of them can hold at
  // budget 0.4 (sekv::MaxHostBytes, checked against built caches in test_sekv), and its
  // window's room for the 41 positions to come.
  const ModelConfig& c = f.model->config;
  const int64_t row = 2 * sizeof(float) * c.num_layers * c.kv_dim();
  DecodeEngineOptions o = SekvFixture::Options(0.4);
  const int64_t prefix = row * (kPrompt - 1);
  const int64_t need = prefix +
                       static_cast<int64_t>(sekv::MaxHostBytes(sekv::CacheShape::FromConfig(c),
                                                               o.sekv.cache, 0.4, kPrompt - 1)
                                                .total()) +
                       row * (kMaxTokens + 1);
  // The first two builds are held until the test releases them.
  Gate first, second;
  std::atomic<int> builds{0};
  o.sekv.max_host_bytes = need * 9 / 5;  // one request's reservation, not two
  o.sekv.before_build = [&] {
    const int n = builds.fetch_add(1);
    if (n == 0) first.Hold();
    if (n == 1) second.Hold();
  };
  std::mutex mu;
  std::vector<sekv::MemoryBreakdown> built;  // each request's host cache, once built
  o.sekv.on_cache = [&](const sekv::MemoryBreakdown& m, bool started) {
    std::lock_guard<std::mutex> lock(mu);
    if (started) built.push_back(m);
  };
  o.min_step_interval = absl::Milliseconds(10);  // request 1 decodes for 400 ms or more
  auto engine = f.ProducerFixture::Engine(o);
  DecodeEventCollector ev;
  const absl::Status refused = engine->Submit(Job(9, 500, 4), ev.For(9));
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.message().find("sekv.max_host_bytes") != std::string_view::npos);

  REQUIRE(engine->Submit(Job(1, kPrompt, kMaxTokens), ev.For(1)).ok());
  REQUIRE(engine->Submit(Job(2, kPrompt, kMaxTokens), ev.For(2)).ok());
  // Request 2 waits for request 1's memory (counted once, by the loop's next look at it).
  REQUIRE(WaitUntil([&] {
    return builds.load() == 1 && engine->queued() == 1 && engine->stats().sekv_host_waits == 1;
  }));
  DecodeEngineStats s = engine->stats();
  CHECK(s.sekv_host_reserved_bytes == need);  // request 1's
  CHECK(s.kv_waits == 1);
  first.Open();
  // Built, request 1 keeps what its host cache holds, which leaves room for request 2's
  // reservation beside it: request 2 reaches its own build while request 1 decodes.
  REQUIRE(WaitUntil([&] { return builds.load() == 2; }));
  s = engine->stats();
  CHECK(!Ended(ev, 1));
  const int64_t held = s.sekv_host_reserved_bytes - need;
  sekv::MemoryBreakdown cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    REQUIRE(built.size() == 1);
    cache = built[0];
  }
  INFO("request 1 holds " << held << " bytes of its reservation of " << need << ": its GPU tier "
                          << cache.gpu() << ", CPU tier " << cache.cpu_bases << ", prompt K/V "
                          << prefix);
  // Both tiers, and the window's room for the positions to come.
  CHECK(held == static_cast<int64_t>(cache.gpu() + cache.cpu_bases) + row * (kMaxTokens + 1));
  CHECK(held <= need - prefix);  // the captured prompt is gone, the rest is within the bound
  CHECK(s.sekv_host_reserved_bytes <= o.sekv.max_host_bytes);
  second.Open();
  ev.WaitFor(2);
  for (uint64_t id : {1, 2}) {
    INFO("request " << id);
    REQUIRE(ev.final_events[id].kind == DecodeEvent::Kind::kDone);
    CHECK(ev.tokens[id].size() == static_cast<size_t>(kMaxTokens));
  }
  CHECK(WaitUntil([&] { return engine->stats().sekv_host_reserved_bytes == 0; }));
}

TEST_CASE(
    "On the CPU SEKV path a built request gives its KV reservation back where the host budget "
    "holds its hierarchy",
    "[cpu]") {
  SekvFixture f;
  constexpr int kPrompt = 200, kTokens = 40;
  auto backend = CreateBackend(BackendKind::kCpu, f.model).value();
  const int64_t full = static_cast<int64_t>(backend->SequenceBytes(kPrompt + kTokens));
  // Two requests whose full caches do not fit the KV budget together; the second runs beside
  // the first only if the first gives its reservation back once built.
  auto run = [&](int64_t max_host_bytes, double host_fraction) {
    DecodeEngineOptions o = SekvFixture::Options(0.4);
    o.kv_budget_bytes = full * 3 / 2;
    o.sekv.max_host_bytes = max_host_bytes;
    o.sekv.host_memory_fraction = host_fraction;
    o.min_step_interval = absl::Milliseconds(10);  // each decodes for 400 ms or more
    // The SEKV requests decoding now and the most at once (on_cache runs on the engine thread
    // alone; the test reads `most` from its own).
    struct Counts {
      int now = 0;
      std::atomic<int> most{0};
    };
    auto counts = std::make_shared<Counts>();
    o.sekv.on_cache = [counts](const sekv::MemoryBreakdown&, bool started) {
      counts->now += started ? 1 : -1;
      if (counts->now > counts->most.load()) counts->most = counts->now;
    };
    auto engine = f.ProducerFixture::Engine(o);
    DecodeEventCollector ev;
    for (uint64_t id : {1, 2}) REQUIRE(engine->Submit(Job(id, kPrompt, kTokens), ev.For(id)).ok());
    ev.WaitFor(2);
    for (uint64_t id : {1, 2}) {
      CHECK(ev.final_events[id].kind == DecodeEvent::Kind::kDone);
      CHECK(ev.tokens[id].size() == static_cast<size_t>(kTokens));
    }
    CHECK(WaitUntil([&] { return engine->stats().kv_reserved_bytes == 0; }));
    return counts->most.load();
  };
  CHECK(run(int64_t{1} << 30, 0.5) == 2);
  CHECK(run(0, 0.5) == 2);  // the host budget as a share of the host's memory
  CHECK(run(0, 0) == 1);    // no host budget: the full reservation stays
}

namespace {

// Two long SEKV prompts, then a short one. Prompts under 100 tokens take the plain path; the
// host budget holds one long prompt's reservation, not two; the first build is held until the
// test opens `gate`.
struct PassingRequests {
  static constexpr int kLong = 200, kShort = 60, kTokens = 8;

  static DecodeEngineOptions Options(const SekvFixture& f, Gate* gate, int64_t kv_budget) {
    DecodeEngineOptions o = SekvFixture::Options(0.4);
    o.sekv.min_prompt_tokens = 100;
    const ModelConfig& c = f.model->config;
    const int64_t row = 2 * sizeof(float) * c.num_layers * c.kv_dim();
    o.sekv.max_host_bytes =
        3 *
        (row * kLong + static_cast<int64_t>(sekv::MaxHostBytes(sekv::CacheShape::FromConfig(c),
                                                               o.sekv.cache, 0.4, kLong - 1)
                                                .total())) /
        2;
    o.kv_budget_bytes = kv_budget;
    auto builds = std::make_shared<std::atomic<int>>(0);
    o.sekv.before_build = [gate, builds] {
      if (builds->fetch_add(1) == 0) gate->Hold();
    };
    return o;
  }

  static void Submit(DecodeEngine& engine, DecodeEventCollector& ev) {
    REQUIRE(engine.Submit(Job(1, kLong, kTokens), ev.For(1)).ok());
    REQUIRE(engine.Submit(Job(2, kLong, kTokens), ev.For(2)).ok());
    REQUIRE(engine.Submit(Job(3, kShort, kTokens), ev.For(3)).ok());
  }

  // Request 3 stays queued behind request 2 while request 1's build is held; then all end.
  static void CheckHeldBack(DecodeEngine& engine, DecodeEventCollector& ev, Gate& gate) {
    REQUIRE(WaitUntil([&] { return engine.stats().sekv_host_waits == 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(engine.queued() == 2);
    CHECK(TokensOf(ev, 3) == 0);
    CHECK(engine.stats().admitted_past_host_wait == 0);
    gate.Open();
    ev.WaitFor(3);
    for (uint64_t id : {1, 2, 3}) CHECK(ev.final_events[id].kind == DecodeEvent::Kind::kDone);
    CHECK(engine.stats().admitted_past_host_wait == 0);
  }
};

// Without a KV budget: request 2 (long) waits for request 1's host memory; request 3 (short,
// plain) passes it and ends while request 1's build is still held.
void CheckPlainPassesHostWait(SekvFixture& f) {
  Gate gate;
  auto engine = f.ProducerFixture::Engine(PassingRequests::Options(f, &gate, 0));
  DecodeEventCollector ev;
  PassingRequests::Submit(*engine, ev);
  REQUIRE(WaitUntil([&] { return Ended(ev, 3); }));
  CHECK(ev.final_events[3].kind == DecodeEvent::Kind::kDone);
  CHECK(ev.tokens[3].size() == static_cast<size_t>(PassingRequests::kTokens));
  CHECK(engine->queued() == 1);  // request 2
  CHECK(TokensOf(ev, 1) == 0);
  DecodeEngineStats s = engine->stats();
  CHECK(s.admitted_past_host_wait == 1);
  CHECK(s.sekv_host_waits == 1);
  gate.Open();
  ev.WaitFor(3);
  for (uint64_t id : {1, 2}) CHECK(ev.final_events[id].kind == DecodeEvent::Kind::kDone);
}

}  // namespace

TEST_CASE(
    "Plain requests pass a SEKV request that waits for host memory alone, but never take the "
    "KV memory or the batch slot it waits beside",
    "[cpu]") {
  SekvFixture f;
  using P = PassingRequests;
  CheckPlainPassesHostWait(f);
  // With a KV budget that holds the two long requests' caches and less than the short one's
  // beside them: request 3 stays behind request 2, so that request 2's KV memory is there when
  // its host memory is.
  {
    auto backend = CreateBackend(BackendKind::kCpu, f.model).value();
    const auto kv = [&](int prompt) {
      return static_cast<int64_t>(backend->SequenceBytes(prompt + P::kTokens));
    };
    Gate gate;
    auto engine =
        f.ProducerFixture::Engine(P::Options(f, &gate, 2 * kv(P::kLong) + kv(P::kShort) / 2));
    DecodeEventCollector ev;
    P::Submit(*engine, ev);
    P::CheckHeldBack(*engine, ev, gate);
  }
  // Nor the batch slot it waits for: with max_batch 2, request 1 holds one, and request 3
  // would take the other.
  {
    Gate gate;
    DecodeEngineOptions o = P::Options(f, &gate, 0);
    o.max_batch = 2;
    auto engine = f.ProducerFixture::Engine(o);
    DecodeEventCollector ev;
    P::Submit(*engine, ev);
    P::CheckHeldBack(*engine, ev, gate);
  }
}

TEST_CASE(
    "Without sekv.max_host_bytes the SEKV host budget is sekv.host_memory_fraction of the "
    "host's available memory at start",
    "[cpu]") {
  SekvFixture f;
  int reads = 0;
  auto options = [&](double fraction, absl::StatusOr<int64_t> available) {
    DecodeEngineOptions o = SekvFixture::Options(0.4);
    o.sekv.host_memory_fraction = fraction;
    o.host_memory_now = [&reads, available]() {
      ++reads;
      return available;
    };
    return o;
  };
  // Half (the default) of 2 MB available: a 200-token prompt's bound (under the 938940 bytes
  // above, with fewer positions to come) fits, a 500-token prompt's does not, and is refused
  // naming both keys.
  DecodeEngineOptions o = options(0.5, int64_t{2000000});
  auto engine = f.ProducerFixture::Engine(o);
  CHECK(reads == 1);  // once for both budgets
  CHECK(engine->stats().sekv_host_budget_bytes == 1000000);
  // The CPU backend's KV caches take from the same host memory: their budget is 0.9 (the
  // default) of what the SEKV budget leaves.
  CHECK(engine->stats().kv_budget_bytes == 900000);
  CHECK(engine->stats().kv_budget_of_host);
  DecodeEventCollector ev;
  const absl::Status refused = engine->Submit(Job(1, 500, 4), ev.For(1));
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.message().find("sekv.host_memory_fraction") != std::string_view::npos);
  REQUIRE(engine->Submit(Job(2, 200, 4), ev.For(2)).ok());
  ev.WaitFor(1);
  CHECK(ev.final_events[2].kind == DecodeEvent::Kind::kDone);
  // An explicit budget wins; the host is read for the KV budget alone, which takes 0.9 of what
  // the SEKV budget leaves.
  o = options(0.5, int64_t{2000000});
  o.sekv.max_host_bytes = 12345;
  const DecodeEngineStats given = f.ProducerFixture::Engine(o)->stats();
  CHECK(given.sekv_host_budget_bytes == 12345);
  CHECK(given.kv_budget_bytes == static_cast<int64_t>(0.9 * (2000000 - 12345)));
  CHECK(reads == 2);
  o.kv_budget_bytes = 54321;  // with both given, the host is not read
  CHECK(f.ProducerFixture::Engine(o)->stats().kv_budget_bytes == 54321);
  CHECK(reads == 2);
  // Fraction 0, or a host whose memory is unknown: no limit. Nothing left: nothing admitted.
  CHECK(f.ProducerFixture::Engine(options(0, int64_t{2000000}))->stats().sekv_host_budget_bytes ==
        0);
  CHECK(f.ProducerFixture::Engine(options(0.5, absl::UnimplementedError("not Linux")))
            ->stats()
            .sekv_host_budget_bytes == 0);
  CHECK(f.ProducerFixture::Engine(options(0.5, int64_t{0}))->stats().sekv_host_budget_bytes == 1);
  // A fraction outside [0, 1], or a host that cannot be read, stops the engine, saying why.
  for (double bad : {-0.5, 1.5}) {
    auto e = f.TryEngine(options(bad, int64_t{2000000}));
    REQUIRE(!e.ok());
    CHECK(e.status().message().find("host_memory_fraction") != std::string_view::npos);
  }
  auto unreadable = f.TryEngine(options(0.5, absl::InvalidArgumentError("no MemAvailable")));
  REQUIRE(!unreadable.ok());
  CHECK(unreadable.status().message().find("sekv.host_memory_fraction") != std::string_view::npos);
  CHECK(unreadable.status().message().find("no MemAvailable") != std::string_view::npos);
  // On this machine: half of what it has now. Without SEKV there is no host budget.
  o = SekvFixture::Options(0.4);
  const int64_t budget = f.ProducerFixture::Engine(o)->stats().sekv_host_budget_bytes;
  absl::StatusOr<int64_t> available = HostMemoryAvailable();
  if (available.ok()) {
    CHECK(budget > 0);
    CHECK(static_cast<double>(budget) ==
          Approx(0.5 * static_cast<double>(*available)).epsilon(0.2));
  } else {
    CHECK(budget == 0);
  }
  CHECK(f.ProducerFixture::Engine(DecodeEngineOptions{})->stats().sekv_host_budget_bytes == 0);
}

TEST_CASE(
    "Prompts shorter than sekv.min_prompt_tokens take the plain path, decoded beside the SEKV "
    "ones, and reserve no SEKV host memory",
    "[cpu]") {
  SekvFixture f;
  constexpr int kShort = 60, kLong = 150, kTokens = 24;
  // The long prompt's build waits for the short request's first token, so the two then decode
  // side by side (the short one slowed to 10 ms a step).
  Gate gate;
  DecodeEngineOptions o = SekvFixture::Options(0.4);
  o.sekv.min_prompt_tokens = 100;
  o.sekv.before_build = [&] { gate.Hold(); };
  o.min_step_interval = absl::Milliseconds(10);
  auto engine = f.ProducerFixture::Engine(o);
  DecodeEventCollector ev;
  REQUIRE(engine->Submit(Job(1, kShort, kTokens), ev.For(1)).ok());
  REQUIRE(engine->Submit(Job(2, kLong, kTokens), ev.For(2)).ok());
  REQUIRE(WaitUntil([&] { return TokensOf(ev, 1) > 0; }));
  gate.Open();
  ev.WaitFor(2);
  DecodeEngineStats s = engine->stats();
  CHECK(s.sekv_requests == 1);
  CHECK(s.max_batch_seen == 2);
  CHECK(s.sekv_step_rows == kTokens - 1);  // the long request's steps only
  // On the CPU backend the two decode in one model step (SekvSession::StepMixed) while both
  // run: at least once, at most once per SEKV step.
  CHECK(s.mixed_steps > 0);
  CHECK(s.mixed_steps <= s.sekv_steps);
  // Each request's tokens are those of its path alone: the short one's the plain engine's,
  // the long one's the SEKV engine's.
  DecodeEngineOptions plain;
  DecodeEngineOptions every = SekvFixture::Options(0.4);
  for (auto [id, prompt, options] :
       {std::tuple{uint64_t{1}, kShort, &plain}, std::tuple{uint64_t{2}, kLong, &every}}) {
    INFO("request " << id);
    REQUIRE(ev.final_events[id].kind == DecodeEvent::Kind::kDone);
    REQUIRE(ev.tokens[id].size() == static_cast<size_t>(kTokens));
    auto alone_engine = f.ProducerFixture::Engine(*options);
    DecodeEventCollector alone;
    REQUIRE(alone_engine->Submit(Job(id, prompt, kTokens), alone.For(id)).ok());
    alone.WaitFor(1);
    CHECK(alone.tokens[id] == ev.tokens[id]);
  }
  // A host budget smaller than a long prompt's estimate refuses it at Submit; a short prompt
  // does not reserve from it.
  o = SekvFixture::Options(0.4);
  o.sekv.min_prompt_tokens = 100;
  o.sekv.max_host_bytes = 1;
  auto tight = f.ProducerFixture::Engine(o);
  DecodeEventCollector ev2;
  const absl::Status refused = tight->Submit(Job(3, kLong, 4), ev2.For(3));
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(tight->Submit(Job(4, kShort, 4), ev2.For(4)).ok());
  ev2.WaitFor(1);
  CHECK(ev2.final_events[4].kind == DecodeEvent::Kind::kDone);
  s = tight->stats();
  CHECK(s.sekv_requests == 0);
  CHECK(s.sekv_host_waits == 0);
}

}  // namespace scd
