// OpenAI request bodies -> our own request structs, validated and bounded. The prefill daemon
// never sees JSON: it gets a CompletionRequest or ChatCompletionRequest whose every field is in
// range, or an InvalidArgument status naming the field (FieldError, openai_error.h), which the
// HTTP layer answers with 400 and an OpenAI error body.
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

namespace scd::http {

// Bounds on what a request may ask for; the daemons fill them from their config.
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

// Decoding controls shared by both endpoints, in range.
struct SamplingParams {
  int max_tokens = 0;        // in [1, RequestLimits::max_tokens]
  float temperature = 1.0f;  // [0, 2]; 0 is greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // 0 = off (the request's -1 or 0); otherwise >= 1
  std::optional<int64_t> seed;
  std::vector<std::string> stop;  // non-empty strings
};

struct CompletionRequest {
  std::string model;
  std::string prompt;  // non-empty
  SamplingParams sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (streaming only)
};

struct ChatCompletionRequest {
  std::string model;
  std::vector<chat::ChatMessage> messages;  // non-empty; roles system/user/assistant
  SamplingParams sampling;
  bool stream = false;
  bool include_usage = false;
};

// Parse and validate. InvalidArgument naming the field for a malformed or out-of-range
// request; a body over limits.max_body_bytes is InvalidArgument answered with 413.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                         const RequestLimits& limits);
absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body,
                                                                 const RequestLimits& limits);

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_OPENAI_API_H_
