// Generate: the single-request generation loop on a Backend: prefill the prompt, then
// sample and decode one token at a time until max_new_tokens, an EOS id, or the context is
// full. Timings are split into prefill and decode so tools can report tokens per second.
#ifndef SCD_COMMON_RUNTIME_GENERATE_H_
#define SCD_COMMON_RUNTIME_GENERATE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"
#include "common/runtime/sampler.h"

namespace scd {

struct GenerateOptions {
  int max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // empty = the model config's eos_token_ids
  // Called with each generated token as soon as it is chosen; return false to stop early.
  std::function<bool(int32_t)> on_token;
};

enum class FinishReason { kLength, kStop, kContextFull, kCancelled };

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (a stop id is not included)
  FinishReason finish = FinishReason::kLength;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // all decode steps together
};

absl::StatusOr<GenerateResult> Generate(Backend& backend, absl::Span<const int32_t> prompt,
                                        const GenerateOptions& options);

}  // namespace scd

#endif  // SCD_COMMON_RUNTIME_GENERATE_H_
