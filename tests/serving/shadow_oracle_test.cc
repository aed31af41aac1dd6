// The shadow oracle (common/serving/shadow_oracle.h) inside the decode engine: its statistics
// are scd-eval's for the same context, a lossless pair shows none, its work runs only while
// the engine has no live request, and a sample past its budget is dropped and counted.
#include "common/serving/shadow_oracle.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/eval/metrics.h"
#include "common/runtime/generate.h"
#include "common/scd/artifact.h"
#include "common/scd/wire_format.h"
#include "tests/scd/scd_fixtures.h"
#include "tests/serving/engine_fixture.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;
using testing::kSanitizerWaitFactor;
using testing::SharedPath;
using testing::SourceFile;

// What the engine's shadow reports: its samples, drops and (with `trace`) the loop's pieces.
struct ShadowLog {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ShadowSample> samples;
  std::vector<std::string> drops;
  std::vector<absl::Status> errors;  // beside drops
  std::vector<EngineTrace> trace;

  void Wire(DecodeEngineOptions& o) {
    o.shadow.on_sample = [this](const ShadowSample& s) {
      std::lock_guard<std::mutex> lock(mu);
      samples.push_back(s);
      cv.notify_all();
    };
    o.shadow.on_drop = [this](const std::string& reason, const absl::Status& error) {
      std::lock_guard<std::mutex> lock(mu);
      drops.push_back(reason);
      errors.push_back(error);
      cv.notify_all();
    };
  }
  void WaitForSamples(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(60 * kSanitizerWaitFactor),
                        [&] { return samples.size() >= n; }));
  }
};

DecodeJob PayloadJob(uint64_t id, const Payload& payload, std::vector<int32_t> suffix,
                     int max_tokens) {
  DecodeJob job;
  job.request_id = id;
  job.payload = SerializePayload(payload);
  job.suffix = std::move(suffix);
  job.max_tokens = max_tokens;
  return job;
}

// A raw payload's job over a synthetic prompt of `tokens` (its content seeded by `seed`): the
// payload covers all but the last `suffix` tokens, which the decode engine prefills.
DecodeJob RawPromptJob(testing::ProducerFixture& f, uint64_t id, int tokens, int seed, int suffix,
                       int max_tokens) {
  const std::vector<int32_t> prompt = testing::SyntheticPrompt(tokens, seed);
  const std::vector<int32_t> context(prompt.begin(), prompt.end() - suffix);
  return PayloadJob(id, f.Encode(CodecMode::kRaw, context),
                    std::vector<int32_t>(prompt.end() - suffix, prompt.end()), max_tokens);
}

// `n` logit rows of `logits` from row `first`.
std::vector<float> RowsOf(const std::vector<float>& logits, int first, int n, int vocab) {
  return std::vector<float>(logits.begin() + static_cast<size_t>(first) * vocab,
                            logits.begin() + static_cast<size_t>(first + n) * vocab);
}

}  // namespace

TEST_CASE("The shadow oracle's statistics are scd-eval's for the same context", "[cpu]") {
  auto base = LoadModel(SharedPath("models/stories260K")).value();
  auto qa = LoadModel(SharedPath("models/stories260K-babi-qa")).value();
  auto artifact = std::make_shared<const ScdArtifact>(
      ScdArtifact::Load(SourceFile("configs/calibration/stories260K-babi-qa.r24.scd.safetensors"))
          .value());
  auto producer = CreateBackend(BackendKind::kCpu, base).value();
  auto consumer = CreateBackend(BackendKind::kCpu, qa).value();
  auto enc = ProducerCodec::Create(base, qa->digest(), artifact).value();
  const std::vector<int32_t> prompt = testing::SampledPassages(*producer, 1, 130, 5)[0];
  const std::vector<int32_t> context(prompt.begin(), prompt.end() - 6);
  const std::vector<int32_t> suffix(prompt.end() - 6, prompt.end());
  auto pseq = producer->NewSequence(static_cast<int>(context.size())).value();
  PrefillResult states;
  REQUIRE(producer->Prefill(*pseq, context, ProducerPrefillOptions(CodecMode::kScd), &states).ok());
  const Payload payload = enc->Encode(CodecMode::kScd, context, states).value();

  DecodeEngineOptions o;
  o.shadow.rate = 1;
  o.shadow.tokens = 8;
  o.shadow.piece_tokens = 32;
  ShadowLog log;
  log.Wire(o);
  auto engine = DecodeEngine::Create(CreateBackend(BackendKind::kCpu, qa).value(),
                                     ConsumerCodec::Create(qa, base->digest(), artifact).value(), o)
                    .value();
  testing::DecodeEventCollector events;
  REQUIRE(engine->Submit(PayloadJob(1, payload, suffix, 8), events.For(1)).ok());
  events.WaitFor(1);
  log.WaitForSamples(1);
  std::vector<int32_t> generated = events.tokens[1];
  const DecodeEvent& done = events.final_events[1];
  REQUIRE(done.kind == DecodeEvent::Kind::kDone);
  if (done.finish_reason == "stop") generated.push_back(qa->config.eos_token_ids.front());
  const int n = std::min<int>(8, static_cast<int>(generated.size()));
  REQUIRE(n >= 2);
  const ShadowSample s = log.samples[0];
  CHECK(s.mode == CodecMode::kScd);
  CHECK(s.context_tokens == static_cast<int>(context.size()));
  CHECK(s.stats.rows == n);

  // scd-eval's text protocol on this context: the consumer's own prefill of everything
  // against the payload's rebuild with the continuation teacher-forced, row for row.
  std::vector<int32_t> continuation = suffix;
  continuation.insert(continuation.end(), generated.begin(), generated.begin() + n - 1);
  std::vector<int32_t> whole = context;
  whole.insert(whole.end(), continuation.begin(), continuation.end());
  PrefillOptions all;
  all.all_logits = true;
  PrefillResult own, served;
  auto oseq = consumer->NewSequence(static_cast<int>(whole.size())).value();
  REQUIRE(consumer->Prefill(*oseq, whole, all, &own).ok());
  auto dec = ConsumerCodec::Create(qa, base->digest(), artifact).value();
  auto sseq = consumer->NewSequence(static_cast<int>(whole.size())).value();
  REQUIRE(dec->Rebuild(payload, *consumer, *sseq).ok());
  REQUIRE(consumer->Prefill(*sseq, continuation, all, &served).ok());
  const int vocab = qa->config.vocab_size;
  const int first_own = static_cast<int>(context.size() + suffix.size()) - 1;
  const auto own_rows = RowsOf(own.logits, first_own, n, vocab);
  const auto served_rows = RowsOf(served.logits, static_cast<int>(suffix.size()) - 1, n, vocab);
  const eval::LogitAgreement want = eval::CompareLogitRows(own_rows, served_rows, vocab).value();
  const double first_kl = eval::NextTokenKl(absl::MakeConstSpan(own_rows).first(vocab),
                                            absl::MakeConstSpan(served_rows).first(vocab))
                              .value();
  const bool first_top1 = eval::Top1Agrees(absl::MakeConstSpan(own_rows).first(vocab),
                                           absl::MakeConstSpan(served_rows).first(vocab))
                              .value();
  CHECK(s.stats.mean_kl == Approx(want.mean_kl).margin(1e-4));
  CHECK(s.stats.top1_agreement == Approx(want.top1_agreement).margin(1e-4));
  CHECK(s.stats.first_kl == Approx(first_kl).margin(1e-4));
  CHECK(s.stats.first_top1 == first_top1);
  CHECK(want.mean_kl > 1e-4);  // a lossy payload: the comparison is not vacuous
  // Per layer, the rebuilt K and V differ from the consumer's own, within its scale.
  REQUIRE(s.stats.k_rel_error.size() == static_cast<size_t>(qa->config.num_layers));
  for (size_t l = 0; l < s.stats.k_rel_error.size(); ++l) {
    CHECK(s.stats.k_rel_error[l] > 1e-3);
    CHECK(s.stats.k_rel_error[l] < 1.5);
    CHECK(s.stats.v_rel_error[l] > 1e-3);
    CHECK(s.stats.v_rel_error[l] < 1.5);
  }
}

TEST_CASE("A lossless pair shows no shadow error", "[cpu]") {
  testing::ProducerFixture f;
  DecodeEngineOptions o;
  o.shadow.rate = 1;
  ShadowLog log;
  log.Wire(o);
  auto engine = f.Engine(o);
  testing::DecodeEventCollector events;
  REQUIRE(engine->Submit(RawPromptJob(f, 1, 90, 3, 4, 6), events.For(1)).ok());
  log.WaitForSamples(1);
  const ShadowStats& s = log.samples[0].stats;
  CHECK(s.first_top1);
  CHECK(s.top1_agreement == 1.0);
  CHECK(s.mean_kl < 1e-4);  // raw's F16 rounding alone
  for (size_t l = 0; l < s.k_rel_error.size(); ++l) {
    CHECK(s.k_rel_error[l] < 2e-3);
    CHECK(s.v_rel_error[l] < 2e-3);
  }
  CHECK(s.k_rel_error.size() == static_cast<size_t>(f.model->config.num_layers));
}

TEST_CASE("Shadow work runs only while the engine has no live request", "[cpu]") {
  testing::ProducerFixture f;
  DecodeEngineOptions o;
  o.shadow.rate = 1;
  o.shadow.piece_tokens = 8;  // many pieces, so that a live request arrives among them
  ShadowLog log;
  log.Wire(o);
  std::unique_ptr<DecodeEngine> engine;
  testing::DecodeEventCollector events;
  const std::vector<int32_t> second = testing::SyntheticPrompt(60, 9);
  // The second request arrives from inside the first shadow piece: live work that lands
  // while the shadow's sample is under way.
  bool submitted = false;
  absl::Status submit_status;
  o.trace = [&](const EngineTrace& t) {
    std::lock_guard<std::mutex> lock(log.mu);
    log.trace.push_back(t);
    if (t.kind == EngineTrace::Kind::kShadowPiece && !submitted) {
      submitted = true;
      DecodeJob job;
      job.request_id = 2;
      job.suffix = second;
      job.max_tokens = 12;
      submit_status = engine->Submit(std::move(job), events.For(2));
    }
  };
  engine = f.Engine(o);
  REQUIRE(engine->Submit(RawPromptJob(f, 1, 120, 4, 3, 5), events.For(1)).ok());
  events.WaitFor(2);
  log.WaitForSamples(1);
  std::lock_guard<std::mutex> lock(log.mu);
  REQUIRE(submit_status.ok());
  // Every piece started with no live request; the first request's steps all came before the
  // first piece (its sample starts once it has ended), so the steps after it are the second's.
  Clock::time_point first_piece{}, live_start{}, live_end{};
  int pieces = 0, live_steps = 0, pieces_after = 0;
  for (const EngineTrace& t : log.trace) {
    if (t.kind == EngineTrace::Kind::kShadowPiece) {
      ++pieces;
      CHECK(t.live == 0);
      if (first_piece == Clock::time_point{}) first_piece = t.start;
    } else if (first_piece != Clock::time_point{}) {
      ++live_steps;
      if (live_start == Clock::time_point{}) live_start = t.start;
      live_end = t.end;
      CHECK(t.live > 0);
    }
  }
  for (const EngineTrace& t : log.trace) {
    if (t.kind != EngineTrace::Kind::kShadowPiece || t.start == first_piece) continue;
    // No piece ran between the second request's first and last steps.
    CHECK((t.end <= live_start || t.start >= live_end));
    if (t.start >= live_end) ++pieces_after;
  }
  CHECK(pieces > 2);
  CHECK(live_steps > 0);
  CHECK(pieces_after > 0);  // the sample went on after the live request, and ended
  // The live request's output is plain generation's.
  GenerateOptions g;
  g.max_new_tokens = 12;
  CHECK(events.tokens[2] == Generate(*f.reference, second, g).value().tokens);
  CHECK(log.drops.empty());
}

TEST_CASE("A shadow sample past its budget is dropped and counted", "[cpu]") {
  testing::ProducerFixture f;
  DecodeEngineOptions o;
  o.shadow.rate = 1;
  o.shadow.max_tokens_per_s = 1;  // the first sample's tokens put the budget in debt for minutes
  ShadowLog log;
  log.Wire(o);
  auto engine = f.Engine(o);
  testing::DecodeEventCollector events;
  for (uint64_t id = 1; id <= 3; ++id) {
    REQUIRE(
        engine->Submit(RawPromptJob(f, id, 50, static_cast<int>(id), 2, 3), events.For(id)).ok());
    events.WaitFor(id);
  }
  log.WaitForSamples(1);
  std::unique_lock<std::mutex> lock(log.mu);
  REQUIRE(log.cv.wait_for(lock, std::chrono::seconds(60), [&] { return log.drops.size() >= 2; }));
  CHECK(log.samples.size() == 1);
  CHECK(log.drops == std::vector<std::string>{"budget", "budget"});
}

TEST_CASE("The shadow oracle samples every 1/rate-th request", "[cpu]") {
  ShadowOptions o;
  o.rate = 0.25;
  ShadowOracle shadow(o);
  int picked = 0;
  for (int i = 0; i < 100; ++i) picked += shadow.Pick() ? 1 : 0;
  CHECK(picked == 25);
  ShadowOracle off(ShadowOptions{});
  CHECK(!off.enabled());
  CHECK(!off.Pick());
}

}  // namespace scd
