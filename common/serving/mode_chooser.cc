// See mode_chooser.h.
#include "common/serving/mode_chooser.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace scd {
namespace {

constexpr double kOracleBytesPerToken = 4;  // the token ids, int32

double Rate(const std::map<CodecMode, double>& rates, CodecMode mode) {
  auto it = rates.find(mode);
  return it == rates.end() ? 0.0 : std::max(0.0, it->second);
}

// What caching `c`'s payload now saves the shape's expected later reuses of the context, each
// of which would otherwise cost `future` (ChooseMode).
double ReuseCredit(const ModeCandidate& c, const StageCosts& costs, const RequestShape& shape,
                   double future) {
  if (shape.future_reuses <= 0 || c.mode == CodecMode::kOracle || future < 0 ||
      shape.cached_tokens >= shape.context_tokens) {
    return 0;
  }
  RequestShape warm = shape;
  warm.cached_tokens = warm.context_tokens;
  warm.producer_wait_seconds = 0;
  return shape.future_reuses * std::max(0.0, future - PredictTtftSeconds(c, costs, warm));
}

// The stages of `c`'s prediction that depend on how the context travels: its encode, transfer
// and rebuild (the oracle's rebuild is the consumer's prefill of the context). The waits and
// prefills the candidates share are left out.
double OwnSeconds(const ModeCandidate& c, const StageCosts& costs, const RequestShape& shape) {
  const int context = std::max(0, shape.context_tokens);
  const int fresh = std::max(0, context - std::max(0, shape.cached_tokens));
  double t = costs.Transfer(c.bytes_per_token * context) + costs.Rebuild(c.mode, context);
  if (c.mode != CodecMode::kOracle) t += costs.Encode(c.mode, fresh);
  return t;
}

}  // namespace

std::vector<ModeCandidate> CandidatesFromQuality(const std::vector<QualityRecord>& quality) {
  std::vector<ModeCandidate> out;
  out.push_back({CodecMode::kOracle, 0, 1.0, kOracleBytesPerToken});
  for (const QualityRecord& r : quality) {
    absl::StatusOr<CodecMode> mode = ParseCodecMode(r.mode);
    if (!mode.ok()) continue;  // a mode this build does not know: never a candidate
    if (*mode == CodecMode::kOracle) {
      out.front().bytes_per_token = r.bytes_per_token;
      continue;
    }
    out.push_back({*mode, r.rung, r.top1, r.bytes_per_token});
  }
  return out;
}

double StageRates::ProducerPrefill(int tokens) const {
  return std::max(0.0, producer_prefill) * tokens;
}
double StageRates::Encode(CodecMode mode, int tokens) const { return Rate(encode, mode) * tokens; }
double StageRates::Transfer(double bytes) const {
  return link_bytes_per_second > 0 ? bytes / link_bytes_per_second : 0.0;
}
double StageRates::Rebuild(CodecMode mode, int tokens) const {
  if (mode == CodecMode::kOracle && rebuild.count(mode) == 0) return ConsumerPrefill(tokens);
  return Rate(rebuild, mode) * tokens;
}
double StageRates::ConsumerPrefill(int tokens) const {
  return std::max(0.0, consumer_prefill) * tokens;
}

double PredictTtftSeconds(const ModeCandidate& c, const StageCosts& costs,
                          const RequestShape& shape) {
  const int context = std::max(0, shape.context_tokens);
  const int fresh = std::max(0, context - std::max(0, shape.cached_tokens));
  // The candidate's own stages, then what the decode daemon adds (the wait for a slot, its own
  // prefill) and, but for the oracle, the producer's wait and prefill.
  double t = OwnSeconds(c, costs, shape) + std::max(0.0, shape.decode_wait_seconds) +
             costs.ConsumerPrefill(std::max(0, shape.suffix_tokens));
  if (c.mode != CodecMode::kOracle) {
    t += std::max(0.0, shape.producer_wait_seconds) + costs.ProducerPrefill(fresh);
  }
  return t;
}

absl::StatusOr<ModeChoice> ChooseMode(const std::vector<ModeCandidate>& candidates,
                                      double quality_floor, const StageCosts& costs,
                                      const RequestShape& shape) {
  return ChooseMode(candidates, quality_floor, costs,
                    [&shape](const ModeCandidate&) { return shape; });
}

absl::StatusOr<ModeChoice> ChooseMode(const std::vector<ModeCandidate>& candidates,
                                      double quality_floor, const StageCosts& costs,
                                      const ShapeFn& shape_of) {
  if (!(quality_floor >= 0 && quality_floor <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("quality floor ", quality_floor, " is outside [0, 1]"));
  }
  std::vector<ModeCandidate> all = candidates;
  if (std::none_of(all.begin(), all.end(),
                   [](const ModeCandidate& c) { return c.mode == CodecMode::kOracle; })) {
    all.insert(all.begin(), {CodecMode::kOracle, 0, 1.0, kOracleBytesPerToken});
  }
  ModeChoice choice;
  std::vector<double> objective(all.size(), 0), predicted(all.size(), 0);
  std::vector<RequestShape> shapes(all.size());
  std::vector<bool> ok(all.size(), false);
  // What a later reuse of the context costs without caching anything more: the oracle, or an
  // admissible candidate already cached.
  double future = -1;
  for (size_t i = 0; i < all.size(); ++i) {
    const ModeCandidate& c = all[i];
    const RequestShape& shape = shapes[i] = shape_of(c);
    if (shape.context_tokens < 0 || shape.suffix_tokens < 0 || shape.cached_tokens < 0 ||
        shape.cached_tokens > shape.context_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("request shape of ", shape.context_tokens, " context, ", shape.cached_tokens,
                       " cached and ", shape.suffix_tokens, " suffix tokens is inconsistent"));
    }
    ok[i] = c.mode == CodecMode::kOracle || c.top1 >= quality_floor;
    predicted[i] = PredictTtftSeconds(c, costs, shape);
    if (i >= all.size() - candidates.size())
      choice.predictions.push_back(ok[i] ? predicted[i] : -1);
    const bool cached = c.mode == CodecMode::kOracle || shape.cached_tokens >= shape.context_tokens;
    if (ok[i] && cached && (future < 0 || predicted[i] < future)) future = predicted[i];
  }
  double lowest = 0;
  int fastest = -1;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!ok[i]) continue;
    objective[i] = predicted[i] - ReuseCredit(all[i], costs, shapes[i], future);
    if (fastest < 0 || objective[i] < lowest) {
      lowest = objective[i];
      fastest = static_cast<int>(i);
    }
  }
  const double within = lowest +
                        OwnSeconds(all[fastest], costs, shapes[fastest]) * kTimeToleranceShare +
                        kTimeToleranceSeconds;
  int best = -1;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!ok[i] || objective[i] > within) continue;
    const ModeCandidate& c = all[i];
    if (best < 0 || c.top1 > all[best].top1 ||
        (c.top1 == all[best].top1 &&
         (objective[i] < objective[best] ||
          (objective[i] == objective[best] && c.bytes_per_token < all[best].bytes_per_token)))) {
      best = static_cast<int>(i);
    }
  }
  choice.predicted_seconds = predicted[best];
  choice.chosen = all[best];  // the oracle is always admissible
  return choice;
}

std::string CandidateName(const ModeCandidate& c, const std::vector<Rung>& ladder) {
  const std::string mode(CodecModeName(c.mode));
  if ((c.mode != CodecMode::kScd && c.mode != CodecMode::kScdReuse) || c.rung < 0 ||
      static_cast<size_t>(c.rung) >= ladder.size()) {
    return mode;
  }
  return absl::StrCat(mode, " ", RungName(ladder[c.rung]));
}

}  // namespace scd
