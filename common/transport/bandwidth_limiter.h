// BandwidthLimiter: a token bucket that paces the send side to a configured rate, so that
// benchmarks can emulate 1/10/100 Gbit/s links on loopback. Tokens are bytes; they refill at
// rate = gbps·10^9/8 bytes/s up to `burst_bytes`. Acquire reserves tokens and lets the
// balance go negative, then sleeps until it is repaid, so concurrent senders are served in
// reservation order and the long-run rate is exact: N bytes take (N − burst)/rate seconds.
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

  // gbps = 0 means unlimited; outside CheckBandwidthGbps's range is INVALID_ARGUMENT.
  // burst_bytes = 0 picks kChunkBytes.
  static absl::StatusOr<std::unique_ptr<BandwidthLimiter>> Create(double gbps,
                                                                  size_t burst_bytes = 0);

  // Blocks until `bytes` may be sent. DEADLINE_EXCEEDED, consuming nothing, when that moment
  // lies beyond `deadline`. Thread-safe.
  absl::Status Acquire(size_t bytes, absl::Time deadline);

  bool unlimited() const { return bytes_per_second_ == 0; }
  double gbps() const { return bytes_per_second_ * 8 / 1e9; }

 private:
  BandwidthLimiter(double bytes_per_second, double burst_bytes);

  const double bytes_per_second_;
  const double burst_bytes_;
  scd::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_refill_ ABSL_GUARDED_BY(mu_);
};

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_BANDWIDTH_LIMITER_H_
