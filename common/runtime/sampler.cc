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
  // uniform_real_distribution(0, total) is generate_canonical · total: the draw is taken here,
  // scaled inside SampleWithDraw once the kept mass is known.
  const double canonical = std::generate_canonical<double, 53>(rng_);
  return SampleWithDraw(logits, params_, canonical, &scratch_);
}

SampleDraw Sampler::Draw() {
  SampleDraw draw;
  draw.params = params_;
  if (params_.temperature != 0.0f && params_.top_k != 1) {
    draw.canonical = std::generate_canonical<double, 53>(rng_);
  }
  return draw;
}

int32_t SampleWithDraw(absl::Span<const float> logits, const SamplingParams& params,
                       double canonical, std::vector<std::pair<float, int32_t>>* scratch) {
  if (params.temperature == 0.0f || params.top_k == 1) return ArgMax(logits);
  std::vector<std::pair<float, int32_t>> local;
  std::vector<std::pair<float, int32_t>>& sorted = scratch != nullptr ? *scratch : local;
  const int n = static_cast<int>(logits.size());
  sorted.resize(n);
  for (int i = 0; i < n; ++i) sorted[i] = {logits[i] / params.temperature, i};
  int keep = n;
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (params.top_k > 0 && params.top_k < n) {
    keep = params.top_k;
    std::partial_sort(sorted.begin(), sorted.begin() + keep, sorted.end(), by_logit);
  } else {
    std::sort(sorted.begin(), sorted.end(), by_logit);
  }
  // Softmax over the kept candidates (sorted descending), then the nucleus cut.
  const float max_v = sorted[0].first;
  double total = 0.0;
  for (int i = 0; i < keep; ++i) {
    sorted[i].first = std::exp(sorted[i].first - max_v);
    total += sorted[i].first;
  }
  if (params.top_p < 1.0f) {
    double cum = 0.0;
    int cut = keep;
    for (int i = 0; i < keep; ++i) {
      cum += sorted[i].first / total;
      if (cum >= params.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = 0.0;
    for (int i = 0; i < keep; ++i) total += sorted[i].first;
  }
  double u = canonical * total;
  for (int i = 0; i < keep; ++i) {
    u -= sorted[i].first;
    if (u <= 0.0) return sorted[i].second;
  }
  return sorted[keep - 1].second;
}

}  // namespace scd
