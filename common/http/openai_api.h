// OpenAI request bodies -> our own request structs, validated and bounded. The prefill daemon
// never sees JSON: it gets a CompletionRequest or ChatCompletionRequest whose every field is in
// range, or an InvalidArgument status naming the field (FieldError, openai_error.h), which the
// HTTP layer answers with 400 and an OpenAI error body. This file reads the JSON types; the
// ranges are request_fields.h's checks, which the gRPC Generation service shares.
//
// Accepted (https://platform.openai.com/docs/api-reference):
//   /v1/completions       model, prompt (a string or an array of one string), max_tokens,
//                         temperature, top_p, top_k (extension, as in vLLM), seed, stop (a
//                         string or an array), stream, stream_options.include_usage
//   /v1/chat/completions  model, messages[] ({role, content}; content may be a string or an
//                         array of {"type": "text"} parts; "developer" is read as "system"),
//                         the same sampling fields, max_completion_tokens (alias of max_tokens)
// Fields we cannot honour are rejected unless they hold their default: n (1), echo (false),
// best_of (1), logprobs, top_logprobs, suffix, logit_bias, presence_penalty and
// frequency_penalty (0), tools, tool_choice, functions, function_call, response_format
// ({"type": "text"}). Unknown fields (user, metadata, ...) are ignored, as OpenAI does. null
// means absent everywhere.
//
// Our extension, in both: `scd`, an object of how the context travels to the specialist:
// `mode` (a codec mode's name: pins it), `rung` (with scd or scd-reuse: a rung of the
// artifact's rate ladder) and `quality_floor` (in [0, 1]: with `mode: auto`, the top-1
// agreement with the oracle the chosen mode must keep) and `fanout` (a list of specialists:
// each answers the same prompt as its own choice, `choices[i]` naming its model; on one
// shared basis they share one payload). Its unknown keys are refused.
#ifndef SCD_COMMON_HTTP_OPENAI_API_H_
#define SCD_COMMON_HTTP_OPENAI_API_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat/chat_template.h"
#include "common/http/request_fields.h"

namespace scd::http {

// The `scd` extension (above); what a request leaves out stays unset.
struct ScdExtension {
  std::optional<std::string> mode;
  std::optional<int> rung;
  std::optional<double> quality_floor;
  // Several specialists answering the same prompt, each as its own choice (empty: the body's
  // `model` alone). Distinct names, at most kMaxFanout.
  std::vector<std::string> fanout;
};
inline constexpr size_t kMaxFanout = 16;

struct CompletionRequest {
  std::string model;
  std::string prompt;  // non-empty
  SamplingParams sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (streaming only)
  ScdExtension scd;
};

struct ChatCompletionRequest {
  std::string model;
  std::vector<chat::ChatMessage> messages;  // non-empty; roles system/user/assistant
  SamplingParams sampling;
  bool stream = false;
  bool include_usage = false;
  ScdExtension scd;
};

// The routes that take a JSON body check its Content-Type first: "application/json", in any
// case, with or without parameters ("; charset=utf-8"). Anything else, or none, is
// InvalidArgument answered with 415 and the code "unsupported_media_type", naming the type
// that came (OpenAI answers the same; a form-encoded body, curl -d's default, is not JSON).
absl::Status CheckJsonContentType(std::string_view content_type);

// Parse and validate. InvalidArgument naming the field for a malformed or out-of-range
// request; a body over limits.max_body_bytes is InvalidArgument answered with 413.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                         const RequestLimits& limits);
absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body,
                                                                 const RequestLimits& limits);

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_OPENAI_API_H_
