// Sampler: picks the next token from logits. Greedy when temperature == 0; otherwise
// softmax(logits / temperature), restricted to the top_k most likely tokens (0 = all) and
// then to the smallest set whose probability reaches top_p (nucleus), sampled with a seeded
// generator so that a (seed, logits sequence) pair always gives the same tokens.
#ifndef SCD_COMMON_RUNTIME_SAMPLER_H_
#define SCD_COMMON_RUNTIME_SAMPLER_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace scd {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = no limit
  float top_p = 1.0f;        // 1 = no limit
  uint64_t seed = 0;

  absl::Status Validate() const;  // errors name the field
};

// One step's sampling decision before the logits exist: the parameters and the draw.
struct SampleDraw {
  SamplingParams params;
  double canonical = 0.0;  // std::generate_canonical<double, 53> of the generator; 0 if greedy
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  int32_t Sample(absl::Span<const float> logits);
  // Takes this step's draw without the logits (for a backend that samples where the logits
  // are, Backend::DecodeSample): SampleWithDraw(logits, Draw()) == Sample(logits), and the
  // generator advances exactly as Sample would advance it.
  SampleDraw Draw();

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

// Index of the largest logit (lowest index on ties).
int32_t ArgMax(absl::Span<const float> logits);

// The token Sampler::Sample picks when its generator's draw for this step is `canonical`
// (std::generate_canonical<double, 53>, in [0, 1)): the draw is scaled by the mass kept after
// top-k and top-p. The contract the device sampler (kernels/cuda SampleRows) implements.
// `scratch` (optional) is reused between calls.
int32_t SampleWithDraw(absl::Span<const float> logits, const SamplingParams& params,
                       double canonical, std::vector<std::pair<float, int32_t>>* scratch = nullptr);

}  // namespace scd

#endif  // SCD_COMMON_RUNTIME_SAMPLER_H_
