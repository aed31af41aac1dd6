// The three Prometheus value types the daemons export: Counter (monotonic), Gauge (settable)
// and Histogram (explicit upper bounds, cumulative on output). Each is lock-free: plain atomics
// updated with relaxed ordering, because a scrape only needs every update to land eventually,
// never a cross-metric snapshot. A histogram keeps one non-cumulative count per bucket and
// derives `_count` from their sum when read, so `_count` always equals the `le="+Inf"` bucket
// (the invariant the Prometheus text format requires). Registration and rendering live in
// registry.h.
#ifndef SCD_COMMON_METRICS_METRIC_H_
#define SCD_COMMON_METRICS_METRIC_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace scd::metrics {

// Adds `delta` to an atomic double (C++17 has no atomic<double>::fetch_add).
inline void AtomicAdd(std::atomic<double>& target, double delta) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

// A value that only goes up (requests served, bytes sent). Negative or NaN increments are
// ignored: a counter that decreases reads as a process restart to Prometheus' rate().
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Increment(double delta = 1.0) {
    if (delta > 0) AtomicAdd(value_, delta);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue depth, registered decode daemons).
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta) { AtomicAdd(value_, delta); }
  void Subtract(double delta) { AtomicAdd(value_, -delta); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations sorted into buckets with explicit, strictly increasing, finite upper bounds;
// the +Inf bucket is implicit. Bounds are validated by the registry (registry.h), which is the
// only place histograms are created.
class Histogram {
 public:
  // What a scrape reads: cumulative counts, one per bound plus the final +Inf bucket.
  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // size upper_bounds.size() + 1
    double sum = 0.0;
    uint64_t count = 0;  // == cumulative_counts.back()
  };

  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose bound is >= value (Prometheus' `le`). NaN is
  // ignored, so that one bad measurement cannot poison `_sum` forever.
  void Observe(double value);
  Snapshot Read() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  const std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> bucket_counts_;  // upper_bounds_.size() + 1
  std::atomic<double> sum_{0.0};
};

// Bucket helpers. `count` bounds start, start*factor, ... (start > 0, factor > 1) and
// start, start+width, ... (width > 0). Invalid arguments give an empty vector, which the
// registry then rejects with a message.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
std::vector<double> LinearBuckets(double start, double width, int count);

}  // namespace scd::metrics

#endif  // SCD_COMMON_METRICS_METRIC_H_
