// The one place absl::Status becomes an HTTP status code and an OpenAI-style error body
// (docs/STYLE.md: errors are translated at the edges only). Everything below the HTTP layer returns
// plain absl::Status; code that knows more than the code can attach it as status payloads:
//   - the request field at fault ("max_tokens", "messages[2].role") -> the body's "param";
//   - a machine-readable error code ("model_not_found", "invalid_api_key") -> "code";
//   - an HTTP status the absl code cannot express (413 Payload Too Large).
// Mapping: InvalidArgument 400, Unauthenticated 401, PermissionDenied 403, NotFound 404,
// ResourceExhausted 429, Unavailable 503, DeadlineExceeded 504, everything else 500. The body
// is {"error": {"message", "type", "param", "code"}}, the shape the official OpenAI clients
// parse into their APIError.
#ifndef SCD_COMMON_HTTP_OPENAI_ERROR_H_
#define SCD_COMMON_HTTP_OPENAI_ERROR_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace scd::http {

// InvalidArgument "Invalid '<param>': <detail>" with `param` attached.
absl::Status FieldError(std::string_view param, std::string_view detail);

// `status` with an OpenAI error code attached (e.g. "model_not_found").
absl::Status WithErrorCode(absl::Status status, std::string_view code);
// `status` answered with `http_status` instead of the mapped one (e.g. 413).
absl::Status WithHttpStatus(absl::Status status, int http_status);

// The attachments above, when present.
std::optional<std::string> ErrorParam(const absl::Status& status);
std::optional<std::string> ErrorCode(const absl::Status& status);

// The HTTP status for a non-OK `status` (200 for OK).
int HttpStatusFor(const absl::Status& status);

// {"error": {...}} for a non-OK `status`. `type` follows the HTTP status
// (invalid_request_error, authentication_error, permission_error, not_found_error,
// rate_limit_error, server_error, service_unavailable_error, timeout_error); `code` is the
// attached code or the absl code in snake_case; `param` is the attached field or null.
nlohmann::json ErrorJson(const absl::Status& status);

// j.dump() that never throws: invalid UTF-8 (say, echoed from a request) becomes U+FFFD.
std::string DumpJson(const nlohmann::json& j);

struct HttpError {
  int status = 500;
  std::string body;  // DumpJson(ErrorJson(...))
};
HttpError ToHttpError(const absl::Status& status);

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_OPENAI_ERROR_H_
