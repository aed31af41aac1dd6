// absl::Status -> HTTP status + OpenAI error body (see openai_error.h). Attachments travel as
// status payloads under type URLs of our own, so they survive being returned up the stack
// unchanged and cost nothing when absent.
#include "common/http/openai_error.h"

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace scd::http {
namespace {

constexpr char kParamUrl[] = "type.scd-serve/openai.param";
constexpr char kCodeUrl[] = "type.scd-serve/openai.code";
constexpr char kHttpStatusUrl[] = "type.scd-serve/http.status";

std::optional<std::string> Payload(const absl::Status& status, const char* url) {
  auto payload = status.GetPayload(url);  // absl::optional, not std:: on Debian
  if (!payload.has_value()) return std::nullopt;
  return std::string(*payload);
}

const char* TypeForHttpStatus(int http_status) {
  switch (http_status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    case 504:
      return "timeout_error";
    default:
      return http_status < 500 ? "invalid_request_error" : "server_error";
  }
}

}  // namespace

absl::Status FieldError(std::string_view param, std::string_view detail) {
  absl::Status status = absl::InvalidArgumentError(
      absl::StrCat("Invalid '", std::string(param), "': ", std::string(detail)));
  status.SetPayload(kParamUrl, absl::Cord(std::string(param)));
  return status;
}

absl::Status WithErrorCode(absl::Status status, std::string_view code) {
  if (!status.ok()) status.SetPayload(kCodeUrl, absl::Cord(std::string(code)));
  return status;
}

absl::Status WithHttpStatus(absl::Status status, int http_status) {
  if (!status.ok()) status.SetPayload(kHttpStatusUrl, absl::Cord(absl::StrCat(http_status)));
  return status;
}

std::optional<std::string> ErrorParam(const absl::Status& status) {
  return Payload(status, kParamUrl);
}

std::optional<std::string> ErrorCode(const absl::Status& status) {
  return Payload(status, kCodeUrl);
}

int HttpStatusFor(const absl::Status& status) {
  if (status.ok()) return 200;
  if (std::optional<std::string> forced = Payload(status, kHttpStatusUrl)) {
    int code = 0;
    if (absl::SimpleAtoi(*forced, &code) && code >= 400 && code <= 599) return code;
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

nlohmann::json ErrorJson(const absl::Status& status) {
  const int http_status = HttpStatusFor(status);
  nlohmann::json error;
  error["message"] = std::string(status.message());
  error["type"] = TypeForHttpStatus(http_status);
  std::optional<std::string> param = ErrorParam(status);
  error["param"] = param.has_value() ? nlohmann::json(*param) : nlohmann::json(nullptr);
  std::optional<std::string> code = ErrorCode(status);
  error["code"] =
      code.has_value() ? *code : absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
  return nlohmann::json{{"error", std::move(error)}};
}

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpError ToHttpError(const absl::Status& status) {
  return HttpError{HttpStatusFor(status), DumpJson(ErrorJson(status))};
}

}  // namespace scd::http
