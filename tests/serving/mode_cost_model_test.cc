// ModeCostModel's fits: an affine stage cost recovered from its samples, seeds before any,
// the mean rate while sizes barely differ, a link that slows down followed within a few
// transfers, and samples that are no times ignored.
#include "common/serving/mode_cost_model.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

namespace scd {
namespace {

TEST_CASE("An affine stage cost is recovered from samples of several sizes", "[cpu]") {
  AffineCostFit fit(0.2);
  CHECK(fit.empty());
  CHECK(fit.Predict(100, 2e-3) == Approx(0.2));  // the seed before any sample
  for (int n : {16, 400, 64, 250, 32, 500}) fit.Add(n, 1e-3 + 5e-5 * n);
  CHECK(fit.Predict(0, 0) == Approx(1e-3).margin(1e-9));
  CHECK(fit.Predict(1000, 0) == Approx(1e-3 + 5e-2));
  // One size only: its mean rate through the origin.
  AffineCostFit one(0.2);
  one.Add(100, 0.01);
  one.Add(100, 0.03);
  CHECK(one.Predict(50, 0) == Approx(0.5 * (0.8 * 0.01 + 0.2 * 0.03)).epsilon(0.01));
  // What is no time is ignored.
  one.Add(-1, 1);
  one.Add(10, std::numeric_limits<double>::quiet_NaN());
  one.Add(10, -0.5);
  CHECK(one.Predict(50, 0) == Approx(0.5 * (0.8 * 0.01 + 0.2 * 0.03)).epsilon(0.01));
}

TEST_CASE("The cost model starts from its seeds and follows a link that slows down", "[cpu]") {
  ModeCostModel m(0.2);
  m.Seed(60e-6, 80e-6, 1.25e9);  // 10 Gbit/s
  CHECK(m.ProducerPrefill(100) == Approx(6e-3));
  CHECK(m.ConsumerPrefill(100) == Approx(8e-3));
  CHECK(m.Rebuild(CodecMode::kOracle, 100) == Approx(8e-3));  // the consumer's prefill
  CHECK(m.Rebuild(CodecMode::kScd, 100) == 0);                // nothing known yet
  CHECK(m.Transfer(1.25e6) == Approx(1e-3));

  // Transfers at 10 Gbit/s, then the link drops to 0.1 Gbit/s: within 20 transfers the
  // prediction is within 10% of the new link. Small transfers (latency, not bandwidth) are
  // no samples.
  for (double bytes : {2e5, 8e5, 4e5}) m.ObserveTransfer(bytes, bytes / 1.25e9);
  m.ObserveTransfer(100, 0.01);
  CHECK(m.Transfer(1e6) == Approx(1e6 / 1.25e9));
  int steps = 0;
  const double slow = 1e6 / 1.25e7;
  while (std::abs(m.Transfer(1e6) - slow) > 0.1 * slow && steps < 100) {
    const double bytes = steps % 2 == 0 ? 2e5 : 9e5;
    m.ObserveTransfer(bytes, bytes / 1.25e7);
    ++steps;
  }
  INFO(steps << " transfers");
  CHECK(steps <= 20);

  // Per-mode stages keep apart; the oracle's own rebuild samples take over from the seed.
  m.ObserveRebuild(CodecMode::kScd, 100, 2e-3);
  m.ObserveRebuild(CodecMode::kRaw, 100, 2e-4);
  CHECK(m.Rebuild(CodecMode::kScd, 200) == Approx(4e-3));
  CHECK(m.Rebuild(CodecMode::kRaw, 200) == Approx(4e-4));
  m.ObserveRebuild(CodecMode::kOracle, 100, 5e-3);
  CHECK(m.Rebuild(CodecMode::kOracle, 100) == Approx(5e-3));
}

TEST_CASE("A request's costs are its decode daemon's: its own link, then the rates it reports",
          "[cpu]") {
  ModeCostModel m(0.2);
  m.Seed(60e-6, 0, 1.25e9);
  m.ObserveConsumerPrefill(100, 8e-3, /*seed=*/true);  // the start-up self-measure
  DecodeSideRates reported;
  reported.rebuild = {{CodecMode::kScd, 3e-5}};
  reported.prefill = 5e-5;
  const TargetCosts a = m.ForTarget("a", reported);
  const TargetCosts b = m.ForTarget("b", {});
  // Unmeasured here: the reported rates, over the seeds; the oracle's rebuild is the prefill.
  CHECK(a.Rebuild(CodecMode::kScd, 100) == Approx(3e-3));
  CHECK(a.ConsumerPrefill(100) == Approx(5e-3));
  CHECK(a.Rebuild(CodecMode::kOracle, 100) == Approx(5e-3));
  CHECK(b.Rebuild(CodecMode::kScd, 100) == 0);
  CHECK(b.ConsumerPrefill(100) == Approx(8e-3));
  // Measured here: the measurement wins.
  m.ObserveRebuild(CodecMode::kScd, 100, 1e-3);
  m.ObserveConsumerPrefill(50, 2e-3);
  CHECK(a.Rebuild(CodecMode::kScd, 100) == Approx(1e-3));
  CHECK(a.ConsumerPrefill(50) == Approx(2e-3).epsilon(0.05));
  // Each daemon's link is its own once measured; before, the specialist's overall rate.
  m.ObserveTransfer(1e6, 1e6 / 1.25e7, "a");  // a: 0.1 Gbit/s
  m.ObserveTransfer(1e6, 1e6 / 1.25e9, "b");  // b: 10 Gbit/s
  CHECK(a.Transfer(1e6) == Approx(0.08));
  CHECK(b.Transfer(1e6) == Approx(8e-4));
  const double overall = m.Transfer(1e6);
  CHECK(m.ForTarget("c", {}).Transfer(1e6) == Approx(overall));
  CHECK(overall > 8e-4);
  CHECK(overall < 0.08);
}

TEST_CASE("Reuses per fresh context follow the share of requests that come back", "[cpu]") {
  ModeCostModel m(0.2);
  CHECK(m.FutureReuses() == 0);
  // The first context and its two questions already say that contexts come back: the share
  // is the samples' weighted mean (1.8 of 2.44), not an average pulled towards the first.
  m.ObserveReuse(false);
  CHECK(m.FutureReuses() == 0);
  m.ObserveReuse(true);
  m.ObserveReuse(true);
  CHECK(m.FutureReuses() == Approx((1.8 / 2.44) / (1 - 1.8 / 2.44)));
  // One fresh context, then two questions about it, over and over: two reuses per context.
  for (int i = 0; i < 300; ++i) m.ObserveReuse(i % 3 != 0);
  // Each sample weighs 0.2: the share swings within the pattern, around 2 reuses a context.
  CHECK(m.FutureReuses() > 1.2);
  CHECK(m.FutureReuses() < 3.5);
  for (int i = 0; i < 300; ++i) m.ObserveReuse(false);  // every context new from here on
  CHECK(m.FutureReuses() < 0.01);
  for (int i = 0; i < 300; ++i) m.ObserveReuse(true);
  CHECK(m.FutureReuses() == ModeCostModel::kMaxFutureReuses);
}

}  // namespace
}  // namespace scd
