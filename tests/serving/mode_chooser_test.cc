// ChooseMode on synthetic costs: the expected mode at each corner (a short context on a fast
// link, a long one on a slow link, a warm prefix cache, a busy producer, a busy consumer),
// never a candidate below the floor, and the prediction's arithmetic.
#include "common/serving/mode_chooser.h"

#include <catch2/catch.hpp>

#include "tests/test_support.h"

namespace scd {
namespace {

// Shaped like the bundled pair's record: raw large and below a 0.95 floor, scd's rungs
// smaller and above it down to rung 2, recompute in between.
std::vector<ModeCandidate> Candidates() {
  return {{CodecMode::kOracle, 0, 1.0, 4},    {CodecMode::kRaw, 0, 0.90, 650},
          {CodecMode::kQuant8, 0, 0.90, 370}, {CodecMode::kRecompute, 0, 0.96, 390},
          {CodecMode::kScd, 0, 0.975, 200},   {CodecMode::kScd, 1, 0.97, 150},
          {CodecMode::kScd, 2, 0.955, 110},   {CodecMode::kScd, 3, 0.90, 70}};
}

// Rates of a small model on a CPU: prefill 60 µs a token on either side, cheap encodes,
// rebuilds from 2 µs (raw) to 30 µs (recompute) a token.
StageRates Rates(double gbit_per_s) {
  StageRates r;
  r.producer_prefill = 60e-6;
  r.consumer_prefill = 60e-6;
  r.encode = {{CodecMode::kRaw, 1e-6},
              {CodecMode::kQuant8, 2e-6},
              {CodecMode::kRecompute, 1e-6},
              {CodecMode::kScd, 4e-6}};
  r.rebuild = {{CodecMode::kRaw, 2e-6},
               {CodecMode::kQuant8, 3e-6},
               {CodecMode::kRecompute, 30e-6},
               {CodecMode::kScd, 8e-6}};
  r.link_bytes_per_second = gbit_per_s * 1e9 / 8;
  return r;
}

ModeChoice Choose(double floor, const StageRates& rates, const RequestShape& shape,
                  std::vector<ModeCandidate> candidates = Candidates()) {
  absl::StatusOr<ModeChoice> c = ChooseMode(candidates, floor, rates, shape);
  REQUIRE(c.ok());
  return *c;
}

TEST_CASE("The prediction adds up the stages of each candidate", "[cpu]") {
  const StageRates r = Rates(8);  // 1e9 bytes a second
  RequestShape s;
  s.context_tokens = 1000;
  s.cached_tokens = 200;
  s.suffix_tokens = 10;
  s.producer_wait_seconds = 0.5;
  s.decode_wait_seconds = 0.25;
  const ModeCandidate oracle{CodecMode::kOracle, 0, 1.0, 4};
  CHECK(PredictTtftSeconds(oracle, r, s) == Approx(4000 / 1e9 + 0.25 + 60e-6 * 1010));
  const ModeCandidate scd{CodecMode::kScd, 1, 0.97, 150};
  CHECK(PredictTtftSeconds(scd, r, s) ==
        Approx(0.5 + (60e-6 + 4e-6) * 800 + 150000 / 1e9 + 0.25 + 8e-6 * 1000 + 60e-6 * 10));
  // An unmeasured link costs nothing; a mode without rates costs its prefill alone.
  StageRates bare;
  bare.producer_prefill = 1e-4;
  CHECK(PredictTtftSeconds({CodecMode::kQuant4, 0, 0.9, 200}, bare, s) ==
        Approx(0.5 + 1e-4 * 800 + 0.25));
}

TEST_CASE("The chooser picks the expected mode at each corner", "[cpu]") {
  RequestShape shape;
  // Warm (the producer's prefix cache holds the context) unless a section says otherwise: cold,
  // codes pay the producer's prefill on top of what the oracle pays its consumer.
  SECTION("a short context on a fast link: the cheapest rebuild above the floor") {
    shape.context_tokens = shape.cached_tokens = 200;
    // Raw is below the floor, so recompute and scd compete: scd's rebuild is cheaper.
    CHECK(Choose(0.95, Rates(100), shape).chosen.mode == CodecMode::kScd);
    // With a floor raw meets, raw wins: the least encode and rebuild work.
    CHECK(Choose(0.85, Rates(100), shape).chosen.mode == CodecMode::kRaw);
  }
  SECTION("a long context on a slow link: the smallest payload above the floor") {
    shape.context_tokens = shape.cached_tokens = 4096;
    const ModeChoice c = Choose(0.95, Rates(0.1), shape);
    CHECK(c.chosen.mode == CodecMode::kScd);
    CHECK(c.chosen.rung == 2);
    // Rung 3 is smaller still, but below the floor: never chosen, and so reported.
    CHECK(c.predictions[7] < 0);
  }
  SECTION("a warm prefix cache: codes even where a cold producer loses to the oracle") {
    shape.context_tokens = 400;
    StageRates slow_producer = Rates(10);
    slow_producer.producer_prefill = 200e-6;  // a busy base model: its prefill costs more
    CHECK(Choose(0.95, slow_producer, shape).chosen.mode == CodecMode::kOracle);
    shape.cached_tokens = 400;
    CHECK(Choose(0.95, slow_producer, shape).chosen.mode == CodecMode::kScd);
  }
  SECTION("a busy producer: the oracle skips its queue") {
    shape.context_tokens = 400;
    shape.producer_wait_seconds = 2.0;
    CHECK(Choose(0.95, Rates(10), shape).chosen.mode == CodecMode::kOracle);
  }
  SECTION("a busy consumer: codes spare its prefill") {
    shape.context_tokens = 400;
    StageRates busy = Rates(10);
    busy.consumer_prefill = 400e-6;  // its prefill shares the GPU with a full batch
    CHECK(Choose(0.95, busy, shape).chosen.mode == CodecMode::kScd);
  }
}

TEST_CASE("Quality is not given up for a difference no prediction can tell", "[cpu]") {
  RequestShape shape;
  shape.context_tokens = shape.cached_tokens = 400;
  StageRates r = Rates(100);
  r.rebuild[CodecMode::kScd] = 2e-6;  // as cheap as raw: the rungs differ only in bytes
  const ModeChoice c = Choose(0.95, r, shape);
  CHECK(c.chosen.mode == CodecMode::kScd);
  CHECK(c.chosen.rung == 0);  // the best agreement, not rung 2's smaller payload
  // A slow link makes the bytes tell: then the smaller rung at the floor.
  CHECK(Choose(0.95, Rates(0.1), shape).chosen.rung == 2);
}

TEST_CASE("A context that comes back is worth caching: the first request pays for it", "[cpu]") {
  RequestShape shape;
  shape.context_tokens = 400;  // cold: the oracle is faster for this request alone
  const ModeChoice alone = Choose(0.95, Rates(10), shape);
  CHECK(alone.chosen.mode == CodecMode::kOracle);
  // Two later questions about the same context: scd cached serves them in a fraction of the
  // oracle's time, which outweighs this request's extra prefill and encode.
  shape.future_reuses = 2;
  const ModeChoice shared = Choose(0.95, Rates(10), shape);
  CHECK(shared.chosen.mode == CodecMode::kScd);
  // The prediction reported is this request's own, slower than the oracle's.
  CHECK(shared.predicted_seconds > alone.predicted_seconds);
  // Already cached: nothing more to gain, the warm prediction alone decides.
  shape.cached_tokens = 400;
  CHECK(Choose(0.95, Rates(10), shape).chosen.mode == CodecMode::kScd);
  // Cached in one rung, the next question keeps to it: caching another gains the reuses
  // nothing over the one they can have already.
  auto cached_in_rung1 = [](const ModeCandidate& c) {
    RequestShape s;
    s.context_tokens = 400;
    s.cached_tokens = c.mode == CodecMode::kScd && c.rung == 1 ? 400 : 0;
    s.future_reuses = 2;
    return s;
  };
  const ModeChoice kept = *ChooseMode(Candidates(), 0.95, Rates(10), cached_in_rung1);
  CHECK(kept.chosen.mode == CodecMode::kScd);
  CHECK(kept.chosen.rung == 1);
}

TEST_CASE("On a long cold context the payloads' own costs decide, not the shared prefill",
          "[cpu]") {
  // 4096 tokens at 0.1 Gbit/s, a prefill of 4 ms a token on the producer and 5 on the
  // consumer: every candidate but the oracle pays the same 16 s producer prefill. quant4 (2.6 KB
  // a token, top-1 0.51) takes 0.85 s to send and 50 ms to rebuild; scd (650 B, top-1 0.36)
  // 0.21 s and 0.23 s. 0.46 s is 3% of the whole prediction, but half of quant4's own stages:
  // scd is faster, and taken.
  StageRates r;
  r.producer_prefill = 4e-3;
  r.consumer_prefill = 5e-3;
  r.rebuild = {{CodecMode::kQuant4, 12e-6}, {CodecMode::kScd, 57e-6}};
  r.link_bytes_per_second = 0.1e9 / 8;
  const std::vector<ModeCandidate> candidates = {{CodecMode::kOracle, 0, 1.0, 4},
                                                 {CodecMode::kQuant4, 0, 0.506, 2600},
                                                 {CodecMode::kScd, 0, 0.364, 650}};
  RequestShape shape;
  shape.context_tokens = 4096;
  shape.suffix_tokens = 12;
  const ModeChoice c = Choose(0.3, r, shape, candidates);
  CHECK(c.chosen.mode == CodecMode::kScd);
  // Where scd is faster by 11 ms, within 3% of its own 0.89 s, the higher agreement wins.
  r.rebuild[CodecMode::kScd] = (0.89 - 650.0 * 4096 / r.link_bytes_per_second) / 4096;
  CHECK(Choose(0.3, r, shape, candidates).chosen.mode == CodecMode::kQuant4);
}

TEST_CASE("No candidate below the floor is ever chosen", "[cpu]") {
  RequestShape shape;
  for (int context : {16, 400, 4096}) {
    for (double gbps : {0.1, 1.0, 10.0, 100.0}) {
      for (double floor : {0.0, 0.9, 0.95, 0.97, 0.99, 1.0}) {
        shape.context_tokens = context;
        const ModeChoice c = Choose(floor, Rates(gbps), shape);
        INFO(context << " tokens, " << gbps << " Gbit/s, floor " << floor);
        CHECK((c.chosen.mode == CodecMode::kOracle || c.chosen.top1 >= floor));
        // And it is the fastest admissible one, or within the tolerance of it.
        for (size_t i = 0; i < c.predictions.size(); ++i) {
          if (c.predictions[i] < 0) continue;
          CHECK(c.predictions[i] * (1 + kTimeToleranceShare) + kTimeToleranceSeconds >=
                c.predicted_seconds);
        }
      }
    }
  }
  // Above every candidate: the oracle, which the list need not even hold.
  shape.context_tokens = 400;
  std::vector<ModeCandidate> no_oracle = Candidates();
  no_oracle.erase(no_oracle.begin());
  const ModeChoice c = Choose(0.999, Rates(10), shape, no_oracle);
  CHECK(c.chosen.mode == CodecMode::kOracle);
  CHECK(c.predictions.size() == no_oracle.size());
}

TEST_CASE("Candidates come from the quality record; bad floors and shapes are refused", "[cpu]") {
  const std::vector<QualityRecord> record = {{"oracle", 0, 0, 1, 4.1},
                                             {"raw", 0, 0.08, 0.7, 650},
                                             {"future-mode", 0, 0, 1, 1},
                                             {"scd", 2, 0.1, 0.96, 110}};
  const std::vector<ModeCandidate> c = CandidatesFromQuality(record);
  REQUIRE(c.size() == 3);  // the unknown mode is no candidate
  CHECK(c[0].mode == CodecMode::kOracle);
  CHECK(c[0].bytes_per_token == 4.1);
  CHECK(c[2].mode == CodecMode::kScd);
  CHECK(c[2].rung == 2);
  CHECK(CandidateName(c[2], RateLadder(16, 24, 3)) == "scd r16/24 k1");
  CHECK(CandidateName(c[1], RateLadder(16, 24, 3)) == "raw");

  RequestShape shape;
  shape.context_tokens = 10;
  CHECK(testing::StatusHas(ChooseMode(c, 1.5, Rates(1), shape).status(), "outside [0, 1]"));
  shape.cached_tokens = 11;
  CHECK(testing::StatusHas(ChooseMode(c, 0.9, Rates(1), shape).status(), "inconsistent"));
}

}  // namespace
}  // namespace scd
