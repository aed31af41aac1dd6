// TokenBucket: the rate limit of one API key (api_keys.h). The bucket holds up to `burst`
// tokens and gains `rate` tokens a second; a request takes one token, and a request that finds
// less than one is refused with the time until the bucket holds one again:
//   tokens(t) = min(burst, tokens(t0) + rate * (t - t0)),   wait = (1 - tokens(t)) / rate.
// So a key may send `burst` requests at once after a quiet spell and `rate` a second for as
// long as it likes. The bucket starts full. Time comes in as an argument, never from a clock
// of its own, so that tests drive it with a fake clock; a time before the last one seen adds
// nothing (steady clocks never go back, fake ones might). Header-only. Not thread-safe: the
// caller holds its key's lock.
#ifndef SCD_PREFILL_SERVER_TOKEN_BUCKET_H_
#define SCD_PREFILL_SERVER_TOKEN_BUCKET_H_

#include <algorithm>
#include <chrono>

namespace scd {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  // `rate` > 0 tokens a second, `burst` >= 1 tokens at most; full at `now`.
  TokenBucket(double rate, double burst, Clock::time_point now)
      : rate_(rate), burst_(burst), tokens_(burst), last_(now) {}

  // Takes one token at `now` and returns 0, or takes none and returns the seconds until one
  // will be there (> 0).
  double TryTake(Clock::time_point now) {
    Refill(now);
    if (tokens_ >= 1) {
      tokens_ -= 1;
      return 0;
    }
    return (1 - tokens_) / rate_;
  }

  // The tokens in the bucket at `now` (for tests and metrics).
  double Tokens(Clock::time_point now) {
    Refill(now);
    return tokens_;
  }

 private:
  void Refill(Clock::time_point now) {
    if (now <= last_) return;
    const double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + rate_ * elapsed);
    last_ = now;
  }

  const double rate_;
  const double burst_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_TOKEN_BUCKET_H_
