// See ttft_estimator.h.
#include "common/serving/ttft_estimator.h"

#include <algorithm>
#include <cmath>

namespace scd {
namespace {

// A backlog predicted to last longer than this is told this: the estimate is no forecast
// that far out, and a client should look again within the hour.
constexpr double kMaxRetryAfterSeconds = 3600;

}  // namespace

void TtftEstimator::Mean::Add(double sample, double weight) {
  value = seen ? value + weight * (sample - value) : sample;
  seen = true;
}

void TtftEstimator::ObserveProducer(absl::Duration held) {
  std::lock_guard<std::mutex> lock(mu_);
  producer_s_.Add(std::max(0.0, absl::ToDoubleSeconds(held)), weight_);
}

void TtftEstimator::ObserveDecode(const std::string& model, absl::Duration first_token_work,
                                  absl::Duration slot_held) {
  const double f = std::max(0.0, absl::ToDoubleSeconds(first_token_work));
  std::lock_guard<std::mutex> lock(mu_);
  ModelState& m = models_[model];
  m.first_token_s.Add(f, weight_);
  m.slot_held_s.Add(std::max(f, absl::ToDoubleSeconds(slot_held)), weight_);
}

TtftEstimate TtftEstimator::Estimate(const std::string& model, const QueueSnapshot& queues) {
  std::lock_guard<std::mutex> lock(mu_);
  ModelState& m = models_[model];
  // A daemon never seen full may have a free slot: then the decode side predicts no wait.
  int64_t slots = 0, load = 0;
  bool all_seen_full = !queues.decodes.empty();
  for (const DecodeQueueView& d : queues.decodes) {
    all_seen_full = all_seen_full && d.slots > 0;
    slots += std::max(0, d.slots);
    load += std::max(0, d.load);
  }

  TtftEstimate e;
  const double producer = (std::max(0, queues.producer_ahead) + 1) * producer_s_.value;
  double decode_slot = 0;
  const int64_t completions_needed = load + std::max(0, queues.dispatch_ahead) - slots + 1;
  if (all_seen_full && completions_needed > 0) {
    decode_slot =
        static_cast<double>(completions_needed) * m.slot_held_s.value / static_cast<double>(slots);
  }
  e.producer = absl::Seconds(producer);
  e.decode_slot = absl::Seconds(decode_slot);
  e.first_token = absl::Seconds(m.first_token_s.value);
  e.total = absl::Seconds(std::max(producer, decode_slot) + m.first_token_s.value);
  return e;
}

int TtftEstimator::RetryAfterSeconds(const TtftEstimate& estimate, absl::Duration limit) {
  const double over = absl::ToDoubleSeconds(estimate.total - limit);
  return static_cast<int>(std::clamp(std::ceil(over), 1.0, kMaxRetryAfterSeconds));
}

}  // namespace scd
