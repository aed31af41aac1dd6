// Server-sent events (https://html.spec.whatwg.org/multipage/server-sent-events.html), the
// framing of OpenAI streaming: each event is `data: <json>` and a blank line, and the stream
// ends with `data: [DONE]`. The writer side frames payloads (multi-line payloads become several
// data lines, which a reader joins with '\n'); comment lines (`: ...`) carry keep-alives that
// clients ignore. SseParser is the reader side for our own clients (tests, scd-loadgen): it
// takes bytes in whatever pieces the socket delivers and returns whole events.
#ifndef SCD_COMMON_HTTP_SSE_H_
#define SCD_COMMON_HTTP_SSE_H_

#include <string>
#include <string_view>
#include <vector>

namespace scd::http {

// The payload OpenAI sends last; an SseParser returns it like any other event's data.
inline constexpr char kSseDonePayload[] = "[DONE]";

// `data: ` + each line of `payload` + "\n", then "\n".
std::string SseEvent(std::string_view payload);
// `: ` + text + "\n\n" (text must not contain newlines; they are replaced by spaces).
std::string SseComment(std::string_view text);

class SseParser {
 public:
  // Consumes `bytes` and returns the data of every event they complete, in order. Comments and
  // fields other than `data` (event, id, retry) are skipped; events without data are dropped.
  // Accepts "\n" and "\r\n" line ends.
  std::vector<std::string> Feed(std::string_view bytes);

 private:
  std::string line_;  // the current, incomplete line
  std::string data_;  // data lines of the current event, joined with '\n'
  bool has_data_ = false;
};

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_SSE_H_
