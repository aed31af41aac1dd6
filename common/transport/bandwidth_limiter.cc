// Token-bucket pacing for the send side (see bandwidth_limiter.h).
#include "common/transport/bandwidth_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace scd::transport {

absl::Status CheckBandwidthGbps(double gbps) {
  if (!(gbps >= 0 && gbps <= kMaxBandwidthGbps)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bandwidth_gbps must be in [0, ", kMaxBandwidthGbps, "] (0 = unlimited), got ", gbps));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BandwidthLimiter>> BandwidthLimiter::Create(double gbps) {
  if (absl::Status st = CheckBandwidthGbps(gbps); !st.ok()) return st;
  return std::unique_ptr<BandwidthLimiter>(new BandwidthLimiter(gbps * 1e9 / 8));
}

BandwidthLimiter::BandwidthLimiter(double bytes_per_second)
    : bytes_per_second_(bytes_per_second),
      tokens_(bytes_per_second * absl::ToDoubleSeconds(kBurstTime)),
      last_refill_(absl::Now()) {}

bool BandwidthLimiter::unlimited() const {
  scd::MutexLock lock(&mu_);
  return bytes_per_second_ == 0;
}

double BandwidthLimiter::gbps() const {
  scd::MutexLock lock(&mu_);
  return bytes_per_second_ * 8 / 1e9;
}

void BandwidthLimiter::Refill(absl::Time now) {
  const double burst = bytes_per_second_ * absl::ToDoubleSeconds(kBurstTime);
  tokens_ =
      std::min(burst, tokens_ + absl::ToDoubleSeconds(now - last_refill_) * bytes_per_second_);
  last_refill_ = now;
}

absl::Status BandwidthLimiter::SetGbps(double gbps) {
  if (absl::Status st = CheckBandwidthGbps(gbps); !st.ok()) return st;
  scd::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (bytes_per_second_ > 0) Refill(now);  // what was earned at the old rate
  // A debt taken at the old rate is repaid on the schedule it was given: kept as time, not
  // bytes. An unlimited link starts the new rate with a full burst.
  const double debt_seconds =
      bytes_per_second_ > 0 && tokens_ < 0 ? -tokens_ / bytes_per_second_ : 0;
  bytes_per_second_ = gbps * 1e9 / 8;
  tokens_ = debt_seconds > 0 ? -debt_seconds * bytes_per_second_
                             : bytes_per_second_ * absl::ToDoubleSeconds(kBurstTime);
  last_refill_ = now;
  return absl::OkStatus();
}

absl::Status BandwidthLimiter::Acquire(size_t bytes, absl::Time deadline) {
  if (bytes == 0) return absl::OkStatus();
  absl::Duration wait;
  {
    scd::MutexLock lock(&mu_);
    if (bytes_per_second_ == 0) return absl::OkStatus();
    const absl::Time now = absl::Now();
    Refill(now);
    const double balance = tokens_ - static_cast<double>(bytes);
    wait = balance >= 0 ? absl::ZeroDuration() : absl::Seconds(-balance / bytes_per_second_);
    if (now + wait > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("bandwidth cap of ", bytes_per_second_ * 8 / 1e9, " Gbit/s: sending ", bytes,
                       " more bytes would end after the deadline"));
    }
    tokens_ = balance;
  }
  absl::SleepFor(wait);
  return absl::OkStatus();
}

}  // namespace scd::transport
