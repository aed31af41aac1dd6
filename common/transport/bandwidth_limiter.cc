// Token-bucket pacing for the send side (see bandwidth_limiter.h).
#include "common/transport/bandwidth_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace scd::transport {

absl::Status CheckBandwidthGbps(double gbps) {
  if (!(gbps >= 0 && gbps <= kMaxBandwidthGbps)) {
    return absl::InvalidArgumentError(absl::StrCat("bandwidth_gbps must be in [0, ",
                                                   kMaxBandwidthGbps, "] (0 = unlimited), got ",
                                                   gbps));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BandwidthLimiter>> BandwidthLimiter::Create(double gbps,
                                                                           size_t burst_bytes) {
  if (absl::Status st = CheckBandwidthGbps(gbps); !st.ok()) return st;
  if (burst_bytes == 0) burst_bytes = kChunkBytes;
  return std::unique_ptr<BandwidthLimiter>(
      new BandwidthLimiter(gbps * 1e9 / 8, static_cast<double>(burst_bytes)));
}

BandwidthLimiter::BandwidthLimiter(double bytes_per_second, double burst_bytes)
    : bytes_per_second_(bytes_per_second),
      burst_bytes_(burst_bytes),
      tokens_(burst_bytes),
      last_refill_(absl::Now()) {}

absl::Status BandwidthLimiter::Acquire(size_t bytes, absl::Time deadline) {
  if (unlimited() || bytes == 0) return absl::OkStatus();
  absl::Duration wait;
  {
    scd::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    tokens_ = std::min(burst_bytes_,
                       tokens_ + absl::ToDoubleSeconds(now - last_refill_) * bytes_per_second_);
    last_refill_ = now;
    const double balance = tokens_ - static_cast<double>(bytes);
    wait = balance >= 0 ? absl::ZeroDuration() : absl::Seconds(-balance / bytes_per_second_);
    if (now + wait > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("bandwidth cap of ", gbps(),
                                                      " Gbit/s: sending ", bytes,
                                                      " more bytes would end after the deadline"));
    }
    tokens_ = balance;
  }
  absl::SleepFor(wait);
  return absl::OkStatus();
}

}  // namespace scd::transport
