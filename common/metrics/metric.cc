// Histogram bucketing and the bucket-layout helpers (see metric.h).
#include "common/metrics/metric.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace scd::metrics {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      bucket_counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) bucket_counts_[i].store(0);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // lower_bound: the first bound >= value, i.e. the smallest `le` that admits it.
  const size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  bucket_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.upper_bounds = upper_bounds_;
  snapshot.cumulative_counts.resize(upper_bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    running += bucket_counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts[i] = running;
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  if (!(start > 0) || !(factor > 1) || count < 1 || !std::isfinite(start)) return bounds;
  double bound = start;
  for (int i = 0; i < count && std::isfinite(bound); ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> bounds;
  if (!(width > 0) || count < 1 || !std::isfinite(start) || !std::isfinite(width)) return bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(start + width * i);
  return bounds;
}

}  // namespace scd::metrics
