// The load generator's HTTP side: one streaming OpenAI request, timed from the client's seat.
//
// StreamReader turns the response body, in whatever pieces the socket delivers, into the
// measurements: SSE framing is common/http/sse.h's SseParser; on top of it each `data:` chunk
// is read the way OpenAI streams them (openai_response.h): a chunk whose choice carries a
// non-empty delta.content (chat) or text (completions) is a content chunk and is stamped with
// the time its bytes arrived; finish_reason and the final usage chunk (stream_options.
// include_usage) give the finish reason and the token counts; {"error": {...}} is a stream
// error; `[DONE]` ends the stream. So TTFT = first content chunk - request start (role-only
// and empty chunks do not count), ITL = the gaps between content chunks, e2e = outcome known -
// request start.
//
// SendStreamingRequest opens a fresh connection per request (Connection: close): a pooled
// keep-alive connection would hold one of the server's connection threads while idle, and a
// fresh one is what makes a request's outcome independent of the one before it. It enforces
// the per-request timeout as a deadline (checked on every received piece; the server's SSE
// keep-alive comments make pieces arrive at least every second) backed by the socket read
// timeout, so a request ends within about twice the timeout even against a silent server.
#ifndef SCD_COMMON_TOOLS_LOADGEN_STREAM_CLIENT_H_
#define SCD_COMMON_TOOLS_LOADGEN_STREAM_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/http/sse.h"
#include "common/tools/loadgen/request_record.h"
#include "common/tools/loadgen/workload.h"

namespace scd::loadgen {

// Where requests go: --url http[s]://HOST[:PORT][/PREFIX]. A trailing "/v1" is dropped, since
// the API paths carry it.
struct Target {
  std::string base;         // "http://HOST:PORT", as httplib::Client takes it
  std::string path_prefix;  // "" or "/PREFIX"
};
absl::StatusOr<Target> ParseUrl(std::string_view url);

class StreamReader {
 public:
  // Consumes body bytes that arrived at `now_s`. After an error or [DONE], further bytes are
  // ignored.
  void Feed(std::string_view bytes, double now_s);

  bool done() const { return done_; }      // `data: [DONE]` seen
  bool failed() const { return failed_; }  // an error event or an unparsable chunk
  const std::string& error() const { return error_; }
  const std::vector<double>& content_times() const { return content_times_; }
  int64_t content_bytes() const { return content_bytes_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }          // -1: no usage seen
  int64_t completion_tokens() const { return completion_tokens_; }  // -1: no usage seen
  const std::string& finish_reason() const { return finish_reason_; }
  int events() const { return events_; }

 private:
  void OnEvent(const std::string& payload, double now_s);
  void Fail(std::string error);

  http::SseParser parser_;
  bool done_ = false;
  bool failed_ = false;
  std::string error_;
  std::vector<double> content_times_;
  int64_t content_bytes_ = 0;
  int64_t prompt_tokens_ = -1;
  int64_t completion_tokens_ = -1;
  std::string finish_reason_;
  int events_ = 0;
};

struct ClientOptions {
  Target target;
  std::string api_key;            // sent as "Authorization: Bearer KEY" when non-empty
  double timeout_s = 300;         // per request, start to outcome
  double connect_timeout_s = 10;  // capped at timeout_s
};

// Sends `body` to target + ApiPath(api), streaming, and fills `record`'s start_s, end_s,
// outcome, http_status, error, request_id, chunk times, token counts and finish reason. Times
// are seconds since `origin`, and a refusal's Retry-After (delay-seconds form) goes to
// retry_after_s. Never throws; every failure becomes an outcome.
void SendStreamingRequest(const ClientOptions& options, Api api, const std::string& body,
                          std::chrono::steady_clock::time_point origin, RequestRecord& record);

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_STREAM_CLIENT_H_
