// See mode_cost_model.h.
#include "common/serving/mode_cost_model.h"

#include <algorithm>
#include <cmath>

namespace scd {
namespace {

// Sizes whose weighted spread is below this share of their mean squared fit no line: the mean
// rate through the origin serves instead.
constexpr double kMinRelativeSpread = 0.01;

}  // namespace

void AffineCostFit::Add(double size, double seconds) {
  if (!(size >= 0) || !(seconds >= 0) || !std::isfinite(size) || !std::isfinite(seconds)) return;
  const double keep = w_ == 0 ? 0.0 : 1.0 - weight_;
  const double w = w_ == 0 ? 1.0 : weight_;
  w_ = keep * w_ + w;
  sx_ = keep * sx_ + w * size;
  sy_ = keep * sy_ + w * seconds;
  sxx_ = keep * sxx_ + w * size * size;
  sxy_ = keep * sxy_ + w * size * seconds;
}

double AffineCostFit::Predict(double size, double seed_slope) const {
  if (w_ == 0) return std::max(0.0, seed_slope) * size;
  const double mx = sx_ / w_, my = sy_ / w_;
  const double var = sxx_ / w_ - mx * mx;
  if (var > kMinRelativeSpread * (sxx_ / w_) && var > 0) {
    const double slope = (sxy_ / w_ - mx * my) / var;
    const double fixed = my - slope * mx;
    // A fit bent by noise (a negative slope or fixed cost) is no cost model: clamp both.
    return std::max(0.0, fixed) + std::max(0.0, slope) * size;
  }
  return mx > 0 ? my / mx * size : my;
}

ModeCostModel::ModeCostModel(double weight)
    : weight_(weight), producer_(weight), consumer_(weight) {}

void ModeCostModel::Seed(double producer_prefill_per_token, double consumer_prefill_per_token,
                         double link_bytes_per_second) {
  std::lock_guard<std::mutex> lock(mu_);
  seed_producer_ = producer_prefill_per_token;
  seed_consumer_ = consumer_prefill_per_token;
  seed_link_ = link_bytes_per_second;
}

AffineCostFit& ModeCostModel::Fit(std::map<CodecMode, AffineCostFit>& fits, CodecMode mode) {
  return fits.try_emplace(mode, weight_).first->second;
}

double ModeCostModel::Read(const std::map<CodecMode, AffineCostFit>& fits, CodecMode mode,
                           double size, double seed_slope) {
  auto it = fits.find(mode);
  return it == fits.end() ? std::max(0.0, seed_slope) * size : it->second.Predict(size, seed_slope);
}

void ModeCostModel::ObserveProducerPrefill(int tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  producer_.Add(tokens, seconds);
}

void ModeCostModel::ObserveEncode(CodecMode mode, int tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Fit(encode_, mode).Add(tokens, seconds);
}

void ModeCostModel::ObserveTransfer(double bytes, double seconds, const std::string& instance) {
  if (!(bytes >= kMinTransferSample) || !(seconds >= 0) || !std::isfinite(seconds)) return;
  std::lock_guard<std::mutex> lock(mu_);
  const double sample = seconds / bytes;
  auto blend = [&](double& rate) { rate = rate < 0 ? sample : rate + weight_ * (sample - rate); };
  blend(seconds_per_byte_);
  if (!instance.empty()) blend(instance_seconds_per_byte_.try_emplace(instance, -1).first->second);
}

void ModeCostModel::ObserveRebuild(CodecMode mode, int tokens, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Fit(rebuild_, mode).Add(tokens, seconds);
}

void ModeCostModel::ObserveConsumerPrefill(int tokens, double seconds, bool seed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!seed && !consumer_measured_) consumer_ = AffineCostFit(weight_);  // the seeds step aside
  consumer_.Add(tokens, seconds);
  consumer_measured_ |= !seed;
}

void ModeCostModel::ObserveReuse(bool reused) {
  std::lock_guard<std::mutex> lock(mu_);
  // A weighted mean of the samples seen (older ones decay by 1 − weight), not an average
  // started at its first sample: after a fresh context and two questions about it the share
  // is already near 2/3, so the next fresh context is weighed as coming back.
  reuse_sum_ = (1 - weight_) * reuse_sum_ + (reused ? 1.0 : 0.0);
  reuse_weight_ = (1 - weight_) * reuse_weight_ + 1;
}

double ModeCostModel::FutureReuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  const double share = reuse_weight_ > 0 ? reuse_sum_ / reuse_weight_ : 0;
  if (share <= 0) return 0;
  if (share >= 1) return kMaxFutureReuses;
  return std::min(kMaxFutureReuses, share / (1 - share));
}

double ModeCostModel::ProducerPrefill(int tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  return producer_.Predict(tokens, seed_producer_);
}

double ModeCostModel::Encode(CodecMode mode, int tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  return Read(encode_, mode, tokens, 0);
}

double ModeCostModel::Transfer(double bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes <= inline_max_bytes_) return 0;
  if (seconds_per_byte_ >= 0) return bytes * seconds_per_byte_;
  return seed_link_ > 0 ? bytes / seed_link_ : 0.0;
}

double ModeCostModel::Rebuild(CodecMode mode, int tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  // The oracle's rebuild is the consumer's prefill: seeded, and read, as one until it has its
  // own samples.
  if (mode == CodecMode::kOracle && rebuild_.count(mode) == 0) {
    return consumer_.Predict(tokens, seed_consumer_);
  }
  return Read(rebuild_, mode, tokens, 0);
}

double ModeCostModel::ConsumerPrefill(int tokens) const {
  std::lock_guard<std::mutex> lock(mu_);
  return consumer_.Predict(tokens, seed_consumer_);
}

double ModeCostModel::TransferTo(const std::string& instance, double bytes) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = instance_seconds_per_byte_.find(instance);
    if (it != instance_seconds_per_byte_.end() && bytes > inline_max_bytes_)
      return bytes * it->second;
  }
  return Transfer(bytes);
}

bool ModeCostModel::RebuildMeasured(CodecMode mode) const {
  std::lock_guard<std::mutex> lock(mu_);
  return rebuild_.count(mode) > 0;
}

bool ModeCostModel::ConsumerMeasured() const {
  std::lock_guard<std::mutex> lock(mu_);
  return consumer_measured_;
}

double TargetCosts::ProducerPrefill(int tokens) const { return model_.ProducerPrefill(tokens); }

double TargetCosts::Encode(CodecMode mode, int tokens) const { return model_.Encode(mode, tokens); }

double TargetCosts::Transfer(double bytes) const { return model_.TransferTo(instance_, bytes); }

double TargetCosts::Rebuild(CodecMode mode, int tokens) const {
  if (!model_.RebuildMeasured(mode)) {
    auto it = reported_.rebuild.find(mode);
    if (it != reported_.rebuild.end()) return it->second * tokens;
    // The oracle's rebuild is the daemon's prefill of the tokens.
    if (mode == CodecMode::kOracle) return ConsumerPrefill(tokens);
  }
  return model_.Rebuild(mode, tokens);
}

double TargetCosts::ConsumerPrefill(int tokens) const {
  if (!model_.ConsumerMeasured() && reported_.prefill > 0) return reported_.prefill * tokens;
  return model_.ConsumerPrefill(tokens);
}

}  // namespace scd
