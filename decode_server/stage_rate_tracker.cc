// See stage_rate_tracker.h.
#include "decode_server/stage_rate_tracker.h"

#include <string>

namespace scd {
namespace {

// rate ← rate + kWeight · (sample − rate); the first sample is taken whole.
void Blend(double sample, double* rate) {
  *rate = *rate > 0 ? *rate + StageRateTracker::kWeight * (sample - *rate) : sample;
}

}  // namespace

void StageRateTracker::Observe(CodecMode mode, int payload_tokens, double rebuild_seconds,
                               int suffix_tokens, double suffix_prefill_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (payload_tokens > 0 && rebuild_seconds > 0) {
    Blend(rebuild_seconds / payload_tokens,
          &rates_.rebuild_seconds_per_token[std::string(CodecModeName(mode))]);
  }
  if (suffix_tokens > 0 && suffix_prefill_seconds > 0) {
    Blend(suffix_prefill_seconds / suffix_tokens, &rates_.prefill_seconds_per_token);
  }
}

rpc::StageRates StageRateTracker::Rates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rates_;
}

}  // namespace scd
