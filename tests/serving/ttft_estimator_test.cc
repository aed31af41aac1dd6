// TtftEstimator: the admission arithmetic of ttft_estimator.h on hand-computed queues — the
// producer and decode-slot waits, the later of the two plus the first-token work, daemons never
// seen full, the weighted means, and the Retry-After seconds.
#include "common/serving/ttft_estimator.h"

#include <catch2/catch.hpp>

namespace scd {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// A decode daemon holding `load` requests, with `slots` (0: never seen full).
DecodeQueueView Daemon(int load, int slots) { return DecodeQueueView{load, slots}; }

}  // namespace

TEST_CASE("TtftEstimator admits everything until it has measured a stage", "[cpu]") {
  TtftEstimator estimator;
  QueueSnapshot q;
  q.producer_ahead = 50;
  q.dispatch_ahead = 60;
  q.decodes = {Daemon(300, 16)};
  const TtftEstimate e = estimator.Estimate("m", q);
  CHECK(e.total == absl::ZeroDuration());
  CHECK(e.producer == absl::ZeroDuration());
  CHECK(e.decode_slot == absl::ZeroDuration());
}

TEST_CASE("TtftEstimator: the producer queue, a prefill in progress counted whole", "[cpu]") {
  TtftEstimator estimator;
  estimator.ObserveProducer(absl::Milliseconds(40));
  QueueSnapshot q;
  q.producer_ahead = 4;  // (4 + 1) × 40 ms
  const TtftEstimate e = estimator.Estimate("m", q);
  CHECK(Seconds(e.producer) == Approx(0.200));
  CHECK(e.decode_slot == absl::ZeroDuration());  // no decode daemon listed, nothing measured
  CHECK(Seconds(e.total) == Approx(0.200));
}

TEST_CASE("TtftEstimator: decode slots turn over every D/B once all are taken", "[cpu]") {
  TtftEstimator estimator;
  // f = 100 ms of first-token work inside a 1.7 s slot.
  estimator.ObserveDecode("m", absl::Milliseconds(100), absl::Milliseconds(1700));
  QueueSnapshot q;
  q.decodes = {Daemon(10, 8), Daemon(9, 8)};  // B = 16, L = 19
  q.dispatch_ahead = 3;
  // 19 + 3 - 16 + 1 = 7 completions at one per 1.7 / 16 s.
  TtftEstimate e = estimator.Estimate("m", q);
  CHECK(Seconds(e.decode_slot) == Approx(7 * 1.7 / 16));
  CHECK(Seconds(e.first_token) == Approx(0.100));
  CHECK(Seconds(e.total) == Approx(7 * 1.7 / 16 + 0.100));

  // A free slot: no wait, the first-token work alone.
  q.decodes = {Daemon(7, 8), Daemon(5, 8)};
  q.dispatch_ahead = 3;  // 7 + 5 + 3 = 15 < 16
  e = estimator.Estimate("m", q);
  CHECK(e.decode_slot == absl::ZeroDuration());
  CHECK(Seconds(e.total) == Approx(0.100));

  // Another model has measured nothing: its queue predicts nothing.
  CHECK(estimator.Estimate("other", q).total == absl::ZeroDuration());
}

TEST_CASE("TtftEstimator takes the later of the two queues, then the first token", "[cpu]") {
  TtftEstimator estimator;
  estimator.ObserveProducer(absl::Milliseconds(100));
  estimator.ObserveDecode("m", absl::Milliseconds(50), absl::Seconds(1));
  QueueSnapshot q;
  q.decodes = {Daemon(4, 4)};
  q.producer_ahead = 9;   // producer: 10 × 0.1 = 1.0 s
  q.dispatch_ahead = 11;  // decode: (4 + 11 - 4 + 1) × 1 / 4 = 3.0 s
  TtftEstimate e = estimator.Estimate("m", q);
  CHECK(Seconds(e.producer) == Approx(1.0));
  CHECK(Seconds(e.decode_slot) == Approx(3.0));
  CHECK(Seconds(e.total) == Approx(3.05));
  q.producer_ahead = 49;  // producer: 5.0 s now the later one
  e = estimator.Estimate("m", q);
  CHECK(Seconds(e.total) == Approx(5.05));
}

TEST_CASE("TtftEstimator: a daemon never seen full predicts no decode wait", "[cpu]") {
  TtftEstimator estimator;
  estimator.ObserveDecode("m", absl::ZeroDuration(), absl::Seconds(2));
  QueueSnapshot q;
  q.dispatch_ahead = 6;
  // It may have a free slot, however many are ahead.
  q.decodes = {Daemon(5, 0)};
  CHECK(estimator.Estimate("m", q).decode_slot == absl::ZeroDuration());
  // Seen full with 4 running: (5 + 6 - 4 + 1) = 8 completions of 2 s / 4.
  q.decodes = {Daemon(5, 4)};
  CHECK(Seconds(estimator.Estimate("m", q).decode_slot) == Approx(8 * 2.0 / 4));
  // Beside it, a daemon never seen full: the router may send the request there.
  q.decodes = {Daemon(5, 4), Daemon(0, 0)};
  CHECK(estimator.Estimate("m", q).decode_slot == absl::ZeroDuration());
  // No daemon listed: nothing to wait for on that side either.
  q.decodes = {};
  CHECK(estimator.Estimate("m", q).decode_slot == absl::ZeroDuration());
}

TEST_CASE("TtftEstimator's means weigh the newest sample by `weight`", "[cpu]") {
  TtftEstimator estimator(/*weight=*/0.25);
  estimator.ObserveProducer(absl::Milliseconds(100));  // the first sample is the mean
  estimator.ObserveProducer(absl::Milliseconds(500));  // 100 + 0.25 × 400 = 200
  estimator.ObserveProducer(absl::ZeroDuration());     // a cache hit: 200 - 0.25 × 200 = 150
  CHECK(Seconds(estimator.Estimate("m", {}).producer) == Approx(0.150));
  // A slot is never held for less than its own first-token work.
  estimator.ObserveDecode("m", absl::Milliseconds(300), absl::Milliseconds(100));
  QueueSnapshot q;
  q.decodes = {Daemon(1, 1)};  // one slot, taken: one completion needed
  CHECK(Seconds(estimator.Estimate("m", q).decode_slot) == Approx(0.300));
}

TEST_CASE("TtftEstimator's Retry-After: whole seconds until the backlog drains", "[cpu]") {
  TtftEstimate e;
  e.total = absl::Milliseconds(7200);
  CHECK(TtftEstimator::RetryAfterSeconds(e, absl::Seconds(5)) == 3);  // ceil(2.2)
  e.total = absl::Milliseconds(5100);
  CHECK(TtftEstimator::RetryAfterSeconds(e, absl::Seconds(5)) == 1);
  e.total = absl::Seconds(4);  // under the limit (not refused): still at least 1
  CHECK(TtftEstimator::RetryAfterSeconds(e, absl::Seconds(5)) == 1);
  e.total = absl::Hours(10);
  CHECK(TtftEstimator::RetryAfterSeconds(e, absl::Seconds(5)) == 3600);
}

}  // namespace scd
