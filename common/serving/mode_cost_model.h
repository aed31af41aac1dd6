// ModeCostModel: the stage costs `mode: auto` weighs (mode_chooser.h), measured from one
// specialist's own recent requests, so that the choices follow the link and the load while
// the daemon runs.
//
// Each compute stage's time is fitted as fixed + per_token × tokens by exponentially weighted
// least squares over its recent samples (each new one weighs `weight`, older ones decay by
// 1 − weight): a short prefill pays mostly its fixed cost and a long one its per-token cost,
// and one rate per token would misjudge one of them. Until a stage has samples of two sizes
// its fit is the mean rate through the origin; until it has any, its seed (Seed). A transfer
// is bytes × the exponentially weighted mean of seconds per byte over transfers of at least
// kMinTransferSample bytes: a link's fixed cost is small beside the stages', and a paced
// link (a token bucket, whose bursts make a transfer's time depend on the ones before it)
// fits no line.
//
// The stages and where their samples come from (the request's Timings):
//   producer prefill   the base model's prefill of the payload's tokens (cache misses)
//   encode, per mode   producer states → payload
//   transfer           payload bytes on the data plane (the inline ones ride in the RPC)
//   rebuild, per mode  payload → consumer KV; the oracle's is the consumer's prefill of it
//   consumer prefill   the decode daemon's prefill of the suffix, and the oracle's rebuild
//
// Per decode daemon (ForTarget: the one a request will likely be routed to): the link is that
// daemon's own, measured from this daemon's transfers to it (the specialist's overall rate
// until it has one); a rebuild of a mode, or the suffix prefill, not yet measured here is read
// at the rate that daemon reports in its heartbeats (DecodeSideRates), before the seeds.
//
// Thread-safe.
#ifndef SCD_COMMON_SERVING_MODE_COST_MODEL_H_
#define SCD_COMMON_SERVING_MODE_COST_MODEL_H_

#include <map>
#include <mutex>
#include <string>

#include "common/scd/wire_format.h"
#include "common/serving/mode_chooser.h"

namespace scd {

// time ≈ fixed + slope × size, fitted by exponentially weighted least squares.
class AffineCostFit {
 public:
  explicit AffineCostFit(double weight) : weight_(weight) {}
  void Add(double size, double seconds);
  bool empty() const { return w_ == 0; }
  // Seconds for `size`: the fit, its mean rate through the origin while the samples' sizes
  // barely differ, or `seed_slope × size` before any sample.
  double Predict(double size, double seed_slope) const;

 private:
  double weight_;
  double w_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;  // decayed weighted sums
};

// What a decode daemon reports of its own work: seconds per token of a rebuild, by mode, and
// of its suffix prefill (0: not reported).
struct DecodeSideRates {
  std::map<CodecMode, double> rebuild;
  double prefill = 0;
};

class ModeCostModel;

// The costs of one request bound for one decode daemon (ModeCostModel::ForTarget).
class TargetCosts : public StageCosts {
 public:
  TargetCosts(const ModeCostModel& model, std::string instance, DecodeSideRates reported)
      : model_(model), instance_(std::move(instance)), reported_(std::move(reported)) {}
  double ProducerPrefill(int tokens) const override;
  double Encode(CodecMode mode, int tokens) const override;
  double Transfer(double bytes) const override;
  double Rebuild(CodecMode mode, int tokens) const override;
  double ConsumerPrefill(int tokens) const override;

 private:
  const ModeCostModel& model_;
  const std::string instance_;
  const DecodeSideRates reported_;
};

class ModeCostModel : public StageCosts {
 public:
  static constexpr double kMinTransferSample = 16 << 10;
  explicit ModeCostModel(double weight = 0.2);

  // Seeds (before any sample): seconds per token of the producer's and the consumer's
  // prefill, and the link's bytes per second (0: transfers cost nothing until measured).
  void Seed(double producer_prefill_per_token, double consumer_prefill_per_token,
            double link_bytes_per_second);
  // Payloads of up to this many bytes ride inside the RPC, off the data plane: no transfer.
  void set_inline_max_bytes(double bytes) { inline_max_bytes_ = bytes; }

  void ObserveProducerPrefill(int tokens, double seconds);
  void ObserveEncode(CodecMode mode, int tokens, double seconds);
  // `instance`: the decode daemon the payload went to (empty: the overall rate only).
  void ObserveTransfer(double bytes, double seconds, const std::string& instance = "");
  void ObserveRebuild(CodecMode mode, int tokens, double seconds);
  // `seed`: a start-up self-measure standing in for the decode daemon's prefill, which a
  // daemon's reported rate overrides; the first real suffix prefill replaces the seeds.
  void ObserveConsumerPrefill(int tokens, double seconds, bool seed = false);
  // Whether a request's context had been seen before (a later request reusing it).
  void ObserveReuse(bool reused);
  // Later requests expected to reuse a fresh context: reuses per fresh context among recent
  // requests, r / (1 − r) for a reuse share r (the weighted mean of the samples, each new one
  // weighing 1 and older ones decaying by 1 − weight), at most kMaxFutureReuses; 0 before any
  // sample.
  double FutureReuses() const;
  static constexpr double kMaxFutureReuses = 8;

  // Each stage's cost at a request's size (the affine fits read at `tokens` and `bytes`).
  double ProducerPrefill(int tokens) const override;
  double Encode(CodecMode mode, int tokens) const override;
  double Transfer(double bytes) const override;
  double Rebuild(CodecMode mode, int tokens) const override;
  double ConsumerPrefill(int tokens) const override;

  // The costs of a request bound for decode daemon `instance`, which reports `reported`.
  TargetCosts ForTarget(std::string instance, DecodeSideRates reported) const {
    return TargetCosts(*this, std::move(instance), std::move(reported));
  }

 private:
  friend class TargetCosts;
  // Seconds for `bytes` to `instance`, by its own rate when measured.
  double TransferTo(const std::string& instance, double bytes) const;
  bool RebuildMeasured(CodecMode mode) const;
  bool ConsumerMeasured() const;

  AffineCostFit& Fit(std::map<CodecMode, AffineCostFit>& fits, CodecMode mode);
  static double Read(const std::map<CodecMode, AffineCostFit>& fits, CodecMode mode, double size,
                     double seed_slope);

  const double weight_;
  mutable std::mutex mu_;
  double seed_producer_ = 0, seed_consumer_ = 0, seed_link_ = 0;
  double inline_max_bytes_ = 0;
  AffineCostFit producer_, consumer_;
  double seconds_per_byte_ = -1;                             // negative: no transfer sample yet
  std::map<std::string, double> instance_seconds_per_byte_;  // by decode daemon
  bool consumer_measured_ = false;                           // a real suffix prefill was observed
  double reuse_sum_ = 0, reuse_weight_ = 0;  // decayed sums of reuse samples and of weights
  std::map<CodecMode, AffineCostFit> encode_, rebuild_;
};

}  // namespace scd

#endif  // SCD_COMMON_SERVING_MODE_COST_MODEL_H_
