// Generate (see generate.h): prefill, then one Decode per new token.
#include "common/runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "common/base/status_macros.h"

namespace scd {

absl::StatusOr<GenerateResult> Generate(Backend& backend, absl::Span<const int32_t> prompt,
                                        const GenerateOptions& options) {
  SCD_RETURN_IF_ERROR(options.sampling.Validate());
  if (options.max_new_tokens < 0) return absl::InvalidArgumentError("max_new_tokens must be >= 0");
  const ModelConfig& config = backend.model().config;
  const int capacity = std::min(config.max_position_embeddings,
                                static_cast<int>(prompt.size()) + options.max_new_tokens);
  if (static_cast<int>(prompt.size()) > config.max_position_embeddings) {
    return absl::OutOfRangeError("prompt is longer than the model's context");
  }
  const std::vector<int32_t>& stops =
      options.stop_ids.empty() ? config.eos_token_ids : options.stop_ids;
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, backend.NewSequence(std::max(capacity, 1)));
  using Clock = std::chrono::steady_clock;
  GenerateResult result;
  auto t0 = Clock::now();
  PrefillResult prefill;
  SCD_RETURN_IF_ERROR(backend.Prefill(*seq, prompt, PrefillOptions{}, &prefill));
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  Sampler sampler(options.sampling);
  std::vector<float> logits = std::move(prefill.logits);
  auto t1 = Clock::now();
  for (int i = 0; i < options.max_new_tokens; ++i) {
    const int32_t next = sampler.Sample(logits);
    if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
      result.finish = FinishReason::kStop;
      break;
    }
    result.tokens.push_back(next);
    if (options.on_token && !options.on_token(next)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (i + 1 == options.max_new_tokens) break;
    if (seq->length() >= seq->capacity()) {
      result.finish = FinishReason::kContextFull;
      break;
    }
    Sequence* batch[] = {seq.get()};
    SCD_RETURN_IF_ERROR(backend.Decode(batch, absl::MakeConstSpan(&next, 1), &logits));
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return result;
}

}  // namespace scd
