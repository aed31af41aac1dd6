// Sampler (see sampler.h). Order of operations follows HF's logits warpers: temperature,
// then top-k, then top-p, then a draw from the renormalised distribution.
#include "common/runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace scd {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be a finite number >= 0, got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  return absl::OkStatus();
}

int32_t ArgMax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

int32_t Sampler::Sample(absl::Span<const float> logits) {
  if (params_.temperature == 0.0f || params_.top_k == 1) return ArgMax(logits);
  const int n = static_cast<int>(logits.size());
  scratch_.resize(n);
  for (int i = 0; i < n; ++i) scratch_[i] = {logits[i] / params_.temperature, i};
  int keep = n;
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (params_.top_k > 0 && params_.top_k < n) {
    keep = params_.top_k;
    std::partial_sort(scratch_.begin(), scratch_.begin() + keep, scratch_.end(), by_logit);
  } else {
    std::sort(scratch_.begin(), scratch_.end(), by_logit);
  }
  // Softmax over the kept candidates (sorted descending), then the nucleus cut.
  const float max_v = scratch_[0].first;
  double total = 0.0;
  for (int i = 0; i < keep; ++i) {
    scratch_[i].first = std::exp(scratch_[i].first - max_v);
    total += scratch_[i].first;
  }
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    int cut = keep;
    for (int i = 0; i < keep; ++i) {
      cum += scratch_[i].first / total;
      if (cum >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = 0.0;
    for (int i = 0; i < keep; ++i) total += scratch_[i].first;
  }
  std::uniform_real_distribution<double> uniform(0.0, total);
  double u = uniform(rng_);
  for (int i = 0; i < keep; ++i) {
    u -= scratch_[i].first;
    if (u <= 0.0) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;
}

}  // namespace scd
