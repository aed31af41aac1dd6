// StageRateTracker: a decode daemon's seconds per token of its recent work, reported in every
// heartbeat and etcd announcement (rpc::StageRates) for the prefill daemons' mode: auto: the
// rebuild of a payload, by codec mode, and its own prefill of a suffix. Each is an
// exponentially weighted mean of seconds / tokens over the requests served (a new one weighs
// kWeight), from any router, so that a prefill daemon that starts beside a busy cluster knows
// the decode side's costs before it has measured any itself. Thread-safe.
#ifndef SCD_DECODE_SERVER_STAGE_RATE_TRACKER_H_
#define SCD_DECODE_SERVER_STAGE_RATE_TRACKER_H_

#include <mutex>

#include "common/rpc/decode_registry.h"
#include "common/scd/wire_format.h"

namespace scd {

class StageRateTracker {
 public:
  static constexpr double kWeight = 0.2;

  // A served request's stages: its payload's rebuild (mode, tokens) and its suffix prefill.
  // Stages of no tokens or no time are not samples.
  void Observe(CodecMode mode, int payload_tokens, double rebuild_seconds, int suffix_tokens,
               double suffix_prefill_seconds);

  rpc::StageRates Rates() const;

 private:
  mutable std::mutex mu_;
  rpc::StageRates rates_;
};

}  // namespace scd

#endif  // SCD_DECODE_SERVER_STAGE_RATE_TRACKER_H_
