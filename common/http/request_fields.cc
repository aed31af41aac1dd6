// See request_fields.h. The messages are the OpenAI API's style ("must be between 1 and 4096,
// got 0"), which the official clients show as they are.
#include "common/http/request_fields.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/chat/chat_template.h"
#include "common/http/openai_error.h"

namespace scd::http {

absl::Status CheckMaxTokens(std::string_view field, int64_t value, int limit) {
  if (value < 1 || value > limit) {
    return FieldError(field, absl::StrCat("must be between 1 and ", limit, ", got ", value));
  }
  return absl::OkStatus();
}

absl::Status ResolveMaxTokens(std::string_view field, std::optional<int64_t> given,
                              const RequestLimits& limits, SamplingParams* sampling) {
  if (given.has_value()) {
    if (absl::Status s = CheckMaxTokens(field, *given, limits.max_tokens); !s.ok()) return s;
    sampling->max_tokens = static_cast<int>(*given);
    sampling->max_tokens_field = std::string(field);
    return absl::OkStatus();
  }
  sampling->max_tokens = std::min(limits.default_max_tokens, limits.max_tokens);
  sampling->max_tokens_field.clear();
  return absl::OkStatus();
}

absl::StatusOr<int> FitMaxTokensToContext(const SamplingParams& sampling, int prompt_tokens,
                                          int context) {
  if (prompt_tokens >= context) {
    return WithErrorCode(
        absl::InvalidArgumentError(absl::StrCat(
            "This model's maximum context length is ", context, " tokens; the prompt has ",
            prompt_tokens, " tokens (at least one more is needed to generate).")),
        "context_length_exceeded");
  }
  const int room = context - prompt_tokens;
  if (sampling.max_tokens_field.empty()) return std::min(sampling.max_tokens, room);
  if (sampling.max_tokens > room) {
    const std::string& field = sampling.max_tokens_field;
    return WithErrorCode(
        absl::InvalidArgumentError(absl::StrCat(
            "This model's maximum context length is ", context, " tokens; this request asks for ",
            int64_t{prompt_tokens} + sampling.max_tokens, " (", prompt_tokens, " in the prompt, ",
            sampling.max_tokens, " in ", field, "). Shorten the prompt or set ", field,
            " to at most ", room, ".")),
        "context_length_exceeded");
  }
  return sampling.max_tokens;
}

absl::Status CheckTemperature(double value) {
  if (!(value >= 0 && value <= 2)) {
    return FieldError("temperature", absl::StrCat("must be at least 0 and at most 2, got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckTopP(double value) {
  if (!(value > 0 && value <= 1)) {
    return FieldError("top_p", absl::StrCat("must be greater than 0 and at most 1, got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckTopK(int64_t value, int* top_k) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (value < -1 || value > kMax) {
    return FieldError("top_k", absl::StrCat("must be between -1 and ", kMax, ", got ", value));
  }
  *top_k = value > 0 ? static_cast<int>(value) : 0;
  return absl::OkStatus();
}

absl::Status CheckModelName(std::string_view model, const RequestLimits& limits) {
  if (model.empty()) return FieldError("model", "must not be empty");
  if (model.size() > limits.max_model_name_bytes) {
    return FieldError("model", absl::StrCat("longer than ", limits.max_model_name_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckStop(absl::Span<const std::string> stop, bool as_list,
                       const RequestLimits& limits) {
  if (stop.size() > limits.max_stop_sequences) {
    return FieldError("stop", absl::StrCat("at most ", limits.max_stop_sequences,
                                           " stop sequences are allowed, got ", stop.size()));
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    const std::string field = as_list ? absl::StrCat("stop[", i, "]") : "stop";
    if (stop[i].empty()) return FieldError(field, "must not be empty");
    if (stop[i].size() > limits.max_stop_bytes) {
      return FieldError(field, absl::StrCat("longer than ", limits.max_stop_bytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMessageCount(size_t count, const RequestLimits& limits) {
  if (count == 0) return FieldError("messages", "must contain at least one message");
  if (count > limits.max_messages) {
    return FieldError("messages", absl::StrCat("at most ", limits.max_messages,
                                               " messages are allowed, got ", count));
  }
  return absl::OkStatus();
}

absl::Status CheckRole(std::string_view field, std::string* role) {
  if (*role == "developer") *role = "system";
  if (!chat::IsKnownRole(*role)) {
    return FieldError(
        field, absl::StrCat("unsupported role '", *role, "' (expected system, user or assistant)"));
  }
  return absl::OkStatus();
}

}  // namespace scd::http
