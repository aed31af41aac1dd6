// BandwidthLimiter: a token bucket that paces the send side to a configured rate, so that
// benchmarks can emulate 0.1 to 100 Gbit/s links on loopback. Tokens are bytes; they refill at
// rate = gbps·10^9/8 bytes/s up to the burst: what the link carries in kBurstTime, so that a
// transfer after an idle spell is early by at most that (a fixed burst in bytes would let a
// whole small payload cross a slow link for free). Acquire reserves tokens and lets the
// balance go negative, then sleeps until it is repaid, so concurrent senders are served in
// reservation order and the long-run rate is exact: N bytes take (N − burst)/rate seconds.
// The rate may change while senders wait (SetGbps: a benchmark's link that slows down or
// speeds up); reservations made before the change keep the time they were given.
#ifndef SCD_COMMON_TRANSPORT_BANDWIDTH_LIMITER_H_
#define SCD_COMMON_TRANSPORT_BANDWIDTH_LIMITER_H_

#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/mutex.h"

namespace scd::transport {

// A link's emulated bandwidth in Gbit/s (the `data_plane.bandwidth_gbps` key,
// TransportOptions::bandwidth_gbps): 0 means unlimited. Its range, in one place: the config
// reader and CheckBandwidthGbps both use it.
inline constexpr double kMaxBandwidthGbps = 1e6;

// OK when `gbps` is in [0, kMaxBandwidthGbps]; otherwise INVALID_ARGUMENT.
absl::Status CheckBandwidthGbps(double gbps);

class BandwidthLimiter {
 public:
  // How many bytes a sender should hand to Acquire at a time: small enough that pacing is
  // smooth, large enough that the per-chunk overhead stays negligible.
  static constexpr size_t kChunkBytes = 256 << 10;

  // How long the link may run ahead of its rate after an idle spell.
  static constexpr absl::Duration kBurstTime = absl::Microseconds(100);

  // gbps = 0 means unlimited; outside CheckBandwidthGbps's range is INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<BandwidthLimiter>> Create(double gbps);

  // Blocks until `bytes` may be sent. DEADLINE_EXCEEDED, consuming nothing, when that moment
  // lies beyond `deadline`. Thread-safe.
  absl::Status Acquire(size_t bytes, absl::Time deadline);

  // Changes the rate from now on (0: unlimited); INVALID_ARGUMENT outside CheckBandwidthGbps's
  // range. Thread-safe.
  absl::Status SetGbps(double gbps);

  bool unlimited() const;
  double gbps() const;

 private:
  explicit BandwidthLimiter(double bytes_per_second);
  // Adds the tokens earned since the last refill, at the current rate, up to the burst.
  void Refill(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable scd::Mutex mu_;
  double bytes_per_second_ ABSL_GUARDED_BY(mu_);
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_refill_ ABSL_GUARDED_BY(mu_);
};

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_BANDWIDTH_LIMITER_H_
