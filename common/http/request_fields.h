// The fields of a generation request, their bounds, and one check per field. Every front door
// that accepts a generation request calls these checks: the OpenAI HTTP API (openai_api.h),
// the gRPC Generation service (prefill_server/generation_service.h) and the decode daemon's
// Decode service (its max_tokens). A value therefore means the same, and is refused in the
// same words, whichever door it came through.
//
// Each check returns OK or FieldError(field, detail) (openai_error.h): InvalidArgument
// "Invalid '<field>': <detail>" with the field attached, which HTTP answers with 400 and the
// field as the error body's "param", and gRPC with INVALID_ARGUMENT and the same message.
//
// max_tokens: a value given must be in [1, limit]; none given takes the server's default. In
// gRPC (proto3) an unset int32 reads 0, so there 0 is "none given" and takes the default.
// Against the model's context, once the prompt is tokenized (FitMaxTokensToContext): a budget
// the request gave must fit beside the prompt, or the request is refused as OpenAI refuses it;
// the default budget is cut to the room the prompt leaves.
#ifndef SCD_COMMON_HTTP_REQUEST_FIELDS_H_
#define SCD_COMMON_HTTP_REQUEST_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace scd::http {

// Bounds on what a request may ask for; the daemons fill them from their config (the
// prefill daemon's limits.*, whose reader takes these members as the keys' defaults).
struct RequestLimits {
  size_t max_body_bytes = 1 << 20;      // whole JSON body; larger is 413
  int max_tokens = 4096;                // ceiling on max_tokens / max_completion_tokens
  int default_max_tokens = 256;         // when the request names none
  size_t max_prompt_bytes = 256 << 10;  // prompt, or all message contents together
  size_t max_messages = 256;
  size_t max_stop_sequences = 4;  // OpenAI's own limit
  size_t max_stop_bytes = 256;    // per stop string
  size_t max_model_name_bytes = 256;
};

// Decoding controls, in range once checked.
struct SamplingParams {
  int max_tokens = 0;  // in [1, RequestLimits::max_tokens]
  // The field the request gave max_tokens in ("max_tokens", "max_completion_tokens"); empty
  // when it gave none and max_tokens is the server's default.
  std::string max_tokens_field;
  float temperature = 1.0f;  // [0, 2]; 0 is greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // 0 = off (the request's -1 or 0); otherwise >= 1
  std::optional<int64_t> seed;
  std::vector<std::string> stop;  // non-empty strings
};

// `field` names the token budget as the request gave it ("max_tokens",
// "max_completion_tokens"). In [1, limit].
absl::Status CheckMaxTokens(std::string_view field, int64_t value, int limit);
// The budget a request gets, into sampling->max_tokens: `given` when set (checked; `field`
// then goes to sampling->max_tokens_field), else the default, within the limit.
absl::Status ResolveMaxTokens(std::string_view field, std::optional<int64_t> given,
                              const RequestLimits& limits, SamplingParams* sampling);
// The budget of a request whose prompt has `prompt_tokens` tokens, on a model whose context
// holds `context` positions: a prompt that leaves no room, or a budget the request gave with
// prompt_tokens + max_tokens > context, is InvalidArgument naming the numbers (code
// "context_length_exceeded"); a default budget is cut to context - prompt_tokens. Called where
// the prompt is first tokenized, which both APIs pass through (GenerationPipeline::Prepare).
absl::StatusOr<int> FitMaxTokensToContext(const SamplingParams& sampling, int prompt_tokens,
                                          int context);
absl::Status CheckTemperature(double value);  // [0, 2]
absl::Status CheckTopP(double value);         // (0, 1]
// >= -1 and within int32: -1 and 0 turn top-k off (SamplingParams::top_k 0).
absl::Status CheckTopK(int64_t value, int* top_k);
absl::Status CheckModelName(std::string_view model, const RequestLimits& limits);
// The stop list's length, then each string: non-empty and at most max_stop_bytes. `as_list`:
// the request gave a list (errors name "stop[i]"), else one string ("stop").
absl::Status CheckStop(absl::Span<const std::string> stop, bool as_list,
                       const RequestLimits& limits);
absl::Status CheckMessageCount(size_t count, const RequestLimits& limits);
// A chat role, "developer" read as "system" (in *role); system, user or assistant.
absl::Status CheckRole(std::string_view field, std::string* role);

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_REQUEST_FIELDS_H_
