// One timed streaming request over cpp-httplib (see stream_client.h).
#include "common/tools/loadgen/stream_client.h"

#include <httplib.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace scd::loadgen {
namespace {

using nlohmann::json;

constexpr size_t kMaxErrorBody = 2048;  // bytes of a non-200 body kept for the message

// A printable one-line excerpt.
std::string Excerpt(std::string_view text, size_t max_bytes = 160) {
  std::string out(text.substr(0, std::min(text.size(), max_bytes)));
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

// The message of an OpenAI error body ({"error": {"message": ...}}), else an excerpt.
std::string ErrorMessage(std::string_view body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("error")) {
    const json& error = parsed["error"];
    if (error.is_object() && error.contains("message") && error["message"].is_string()) {
      return Excerpt(error["message"].get<std::string>(), 300);
    }
    if (error.is_string()) return Excerpt(error.get<std::string>(), 300);
  }
  return Excerpt(body);
}

// What went wrong, for the records; httplib's own names ("Connection", "Read") are terse.
std::string DescribeError(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "could not connect (refused or unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "connect timed out";
    case httplib::Error::Read:
      return "read failed (connection closed or reset)";
    case httplib::Error::Write:
      return "write failed (connection closed or reset)";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLServerVerification:
      return "TLS server certificate verification failed";
    default:
      return absl::StrCat("httplib error ", httplib::to_string(error));
  }
}

}  // namespace

absl::StatusOr<Target> ParseUrl(std::string_view url) {
  std::string_view rest = url;
  std::string scheme = "http";
  if (const size_t sep = rest.find("://"); sep != std::string_view::npos) {
    scheme = absl::AsciiStrToLower(std::string(rest.substr(0, sep)));
    rest.remove_prefix(sep + 3);
  }
  if (scheme != "http" && scheme != "https") {
    return absl::InvalidArgumentError(
        absl::StrCat("--url: scheme \"", scheme, "\" is not http or https"));
  }
  const size_t slash = rest.find('/');
  std::string_view host_port = rest.substr(0, slash);
  std::string path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  if (host_port.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--url: no host in \"", std::string(url), "\""));
  }
  // The port (after the last ':' outside an IPv6 literal's brackets) must be a number.
  const size_t colon = host_port.rfind(':');
  const size_t bracket = host_port.rfind(']');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    int port = 0;
    const std::string_view digits = host_port.substr(colon + 1);
    if (!absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &port) || port < 1 ||
        port > 65535 || colon == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--url: bad host:port \"", std::string(host_port), "\""));
    }
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0)
    path.resize(path.size() - 3);
  return Target{absl::StrCat(scheme, "://", std::string(host_port)), path};
}

void StreamReader::Fail(std::string error) {
  failed_ = true;
  error_ = std::move(error);
}

void StreamReader::Feed(std::string_view bytes, double now_s) {
  if (done_ || failed_) return;
  for (const std::string& payload : parser_.Feed(bytes)) {
    OnEvent(payload, now_s);
    if (done_ || failed_) return;
  }
}

void StreamReader::OnEvent(const std::string& payload, double now_s) {
  ++events_;
  if (payload == http::kSseDonePayload) {
    done_ = true;
    return;
  }
  json chunk = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) {
    return Fail(absl::StrCat("unparsable stream chunk: ", Excerpt(payload)));
  }
  if (chunk.contains("error") && !chunk["error"].is_null()) {
    return Fail(absl::StrCat("error event: ", ErrorMessage(payload)));
  }
  bool content = false;
  if (chunk.contains("choices") && chunk["choices"].is_array()) {
    for (const json& choice : chunk["choices"]) {
      if (!choice.is_object()) continue;
      const json* text = nullptr;
      if (choice.contains("delta") && choice["delta"].is_object() &&
          choice["delta"].contains("content")) {
        text = &choice["delta"]["content"];
      } else if (choice.contains("text")) {
        text = &choice["text"];
      }
      if (text != nullptr && text->is_string()) {
        const size_t n = text->get_ref<const std::string&>().size();
        if (n > 0) {
          content = true;
          content_bytes_ += static_cast<int64_t>(n);
        }
      }
      if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
        finish_reason_ = choice["finish_reason"].get<std::string>();
      }
    }
  }
  if (content) content_times_.push_back(now_s);
  if (chunk.contains("usage") && chunk["usage"].is_object()) {
    const json& usage = chunk["usage"];
    if (usage.contains("prompt_tokens") && usage["prompt_tokens"].is_number_integer()) {
      prompt_tokens_ = usage["prompt_tokens"].get<int64_t>();
    }
    if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer()) {
      completion_tokens_ = usage["completion_tokens"].get<int64_t>();
    }
  }
}

namespace {

using Clock = std::chrono::steady_clock;

// What one streaming exchange left behind: the response's status and id, the stream read so
// far, an error body, and how the transfer ended.
struct Exchange {
  StreamReader reader;
  bool got_response = false;
  bool deadline_hit = false;
  int status = 0;
  std::string request_id;
  std::string retry_after;  // the Retry-After header, as sent
  std::string error_body;
  std::string content_type;
  httplib::Error error = httplib::Error::Success;
  Clock::time_point deadline;
};

// The POST of `body`, streaming into `x` (its handlers stop the transfer past x.deadline).
httplib::Request MakeRequest(const ClientOptions& options, Api api, const std::string& body,
                             std::chrono::steady_clock::time_point origin, Exchange& x) {
  httplib::Request req;
  req.method = "POST";
  req.path = options.target.path_prefix + ApiPath(api);
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  if (!options.api_key.empty()) req.set_header("Authorization", "Bearer " + options.api_key);
  req.response_handler = [&x](const httplib::Response& response) {
    x.got_response = true;
    x.status = response.status;
    x.request_id = response.get_header_value("X-Request-Id");
    x.retry_after = response.get_header_value("Retry-After");
    return true;
  };
  req.content_receiver = [&x, origin](const char* data, size_t n, uint64_t, uint64_t) {
    const double now_s = std::chrono::duration<double>(Clock::now() - origin).count();
    if (Clock::now() > x.deadline) {
      x.deadline_hit = true;
      return false;  // aborts the transfer
    }
    if (x.status == 200) {
      x.reader.Feed(std::string_view(data, n), now_s);
    } else if (x.error_body.size() < kMaxErrorBody) {
      x.error_body.append(data, std::min(n, kMaxErrorBody - x.error_body.size()));
    }
    return true;
  };
  return req;
}

// The record's outcome and error from how the exchange ended (start and end already set).
void SetOutcome(const ClientOptions& options, const Exchange& x, RequestRecord& record) {
  const StreamReader& reader = x.reader;
  const bool past_deadline = x.deadline_hit || record.e2e_s() >= options.timeout_s * 0.999;
  if (x.error != httplib::Error::Success && past_deadline) {
    record.outcome = Outcome::kTimeout;
    record.error = absl::StrCat("no outcome within --timeout ", options.timeout_s, " s",
                                x.got_response ? "" : " (no response headers)");
  } else if (!x.got_response) {
    record.outcome = Outcome::kConnectionError;
    record.error =
        absl::StrCat(DescribeError(x.error), record.error.empty() ? "" : ": ", record.error);
  } else if (x.status != 200) {
    record.outcome = Outcome::kHttpError;
    record.error = absl::StrCat("HTTP ", x.status, ": ", ErrorMessage(x.error_body));
  } else if (reader.failed()) {
    record.outcome = Outcome::kStreamError;
    record.error = reader.error();
  } else if (x.error != httplib::Error::Success) {
    record.outcome = Outcome::kStreamError;
    record.error = absl::StrCat("connection lost mid-stream after ", reader.events(),
                                " events: ", DescribeError(x.error));
  } else if (!reader.done()) {
    record.outcome = Outcome::kStreamError;
    record.error = absl::StrCat("stream ended without data: [DONE] after ", reader.events(),
                                " events (Content-Type: ", x.content_type, ")");
  } else {
    record.outcome = Outcome::kOk;
    record.error.clear();
  }
}

}  // namespace

void SendStreamingRequest(const ClientOptions& options, Api api, const std::string& body,
                          std::chrono::steady_clock::time_point origin, RequestRecord& record) {
  auto seconds_since_origin = [origin] {
    return std::chrono::duration<double>(Clock::now() - origin).count();
  };
  const auto timeout = std::chrono::microseconds(static_cast<int64_t>(options.timeout_s * 1e6));
  const auto connect_timeout = std::chrono::microseconds(
      static_cast<int64_t>(std::min(options.connect_timeout_s, options.timeout_s) * 1e6));
  Exchange x;
  httplib::Request req = MakeRequest(options, api, body, origin, x);
  httplib::Response res;
  record.start_s = seconds_since_origin();
  x.deadline = Clock::now() + timeout;
  try {
    httplib::Client client(options.target.base);
    client.set_keep_alive(false);
    client.set_connection_timeout(connect_timeout);
    client.set_read_timeout(timeout);
    client.set_write_timeout(timeout);
    client.send(req, res, x.error);    // false exactly when error is set
  } catch (const std::exception& e) {  // httplib throws for a malformed host
    x.error = httplib::Error::Unknown;
    record.error = e.what();
  }
  record.end_s = seconds_since_origin();
  x.content_type = res.get_header_value("Content-Type");
  record.http_status = x.status;
  record.request_id = x.request_id;
  // Only the delay-seconds form of Retry-After; an HTTP-date leaves it absent.
  int retry_after = -1;
  if (x.status != 200 && absl::SimpleAtoi(x.retry_after, &retry_after) && retry_after >= 0) {
    record.retry_after_s = retry_after;
  }
  record.chunk_times_s = x.reader.content_times();
  record.prompt_tokens = x.reader.prompt_tokens();
  record.completion_tokens = x.reader.completion_tokens();
  record.finish_reason = x.reader.finish_reason();
  SetOutcome(options, x, record);
}

}  // namespace scd::loadgen
