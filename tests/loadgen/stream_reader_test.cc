// StreamReader: OpenAI stream chunks (as openai_response.h encodes them) fed in arbitrary
// pieces, including one byte at a time, must give the same content times, usage, finish
// reason and end-of-stream; error events and garbage are stream errors.
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "common/http/openai_response.h"
#include "common/http/sse.h"
#include "common/tools/loadgen/stream_client.h"

namespace scd::loadgen {
namespace {

// A whole chat or completion stream of `tokens` tokens with usage, framed as SSE.
std::string Stream(http::ApiKind kind, int tokens) {
  http::StreamEncoder encoder(kind, http::NewResponseInfo(kind, "m"), /*include_usage=*/true);
  std::string body = ": keep-alive\n\n";  // comments are ignored
  for (int i = 0; i < tokens; ++i) body += http::SseEvent(encoder.Delta(" t" + std::to_string(i)));
  for (const std::string& payload : encoder.Finish(http::FinishReason::kLength, {11, tokens})) {
    body += http::SseEvent(payload);
  }
  body += http::SseEvent(http::kSseDonePayload);
  return body;
}

TEST_CASE("a chat stream split at every byte boundary reads the same", "[cpu]") {
  const std::string body = Stream(http::ApiKind::kChatCompletion, 4);
  StreamReader whole;
  whole.Feed(body, 1.0);
  CHECK(whole.done());
  CHECK_FALSE(whole.failed());
  CHECK(whole.content_times() == std::vector<double>(4, 1.0));
  CHECK(whole.prompt_tokens() == 11);
  CHECK(whole.completion_tokens() == 4);
  CHECK(whole.finish_reason() == "length");
  CHECK(whole.content_bytes() == 12);  // " t0" .. " t3"

  // One byte per Feed, each stamped with its offset: a chunk's time is when its last byte came.
  StreamReader bytewise;
  std::vector<double> expected;
  size_t search = 0;
  while (true) {
    const size_t at = body.find("\"content\":\" t", search);
    if (at == std::string::npos) break;
    expected.push_back(static_cast<double>(body.find("\n\n", at) + 1));  // the event's end
    search = at + 1;
  }
  REQUIRE(expected.size() == 4);
  for (size_t i = 0; i < body.size(); ++i) {
    bytewise.Feed(std::string_view(body).substr(i, 1), static_cast<double>(i));
  }
  CHECK(bytewise.done());
  CHECK(bytewise.content_times() == expected);
  CHECK(bytewise.completion_tokens() == 4);

  // Pieces of 7 bytes, with "\r\n" line ends.
  std::string crlf;
  for (char c : body) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  StreamReader pieces;
  for (size_t i = 0; i < crlf.size(); i += 7) pieces.Feed(std::string_view(crlf).substr(i, 7), 0);
  CHECK(pieces.done());
  CHECK(pieces.content_times().size() == 4);
  CHECK(pieces.prompt_tokens() == 11);
}

TEST_CASE("role-only and empty chunks are not content; completions read text", "[cpu]") {
  StreamReader chat;
  chat.Feed(http::SseEvent(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})"), 1);
  chat.Feed(
      http::SseEvent(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"), 2);
  CHECK(chat.content_times().empty());
  chat.Feed(http::SseEvent(R"({"choices":[{"index":0,"delta":{"content":"x"}}]})"), 3);
  CHECK(chat.content_times() == std::vector<double>{3});
  CHECK_FALSE(chat.done());

  const std::string body = Stream(http::ApiKind::kCompletion, 3);
  StreamReader completion;
  for (size_t i = 0; i < body.size(); i += 5)
    completion.Feed(std::string_view(body).substr(i, 5), 0);
  CHECK(completion.done());
  CHECK(completion.content_times().size() == 3);
  CHECK(completion.completion_tokens() == 3);
}

TEST_CASE("error events and unparsable chunks are stream errors", "[cpu]") {
  StreamReader error;
  error.Feed(http::SseEvent(R"({"choices":[{"index":0,"text":"a"}]})"), 0);
  error.Feed(http::SseEvent(R"({"error":{"message":"decode daemon lost","type":"server_error"}})"),
             1);
  error.Feed(http::SseEvent(http::kSseDonePayload), 2);  // ignored after the error
  CHECK(error.failed());
  CHECK(error.error() == "error event: decode daemon lost");
  CHECK_FALSE(error.done());
  CHECK(error.content_times().size() == 1);

  StreamReader garbage;
  garbage.Feed("data: {not json\n\n", 0);
  CHECK(garbage.failed());
  CHECK(garbage.error().find("unparsable stream chunk") == 0);

  StreamReader truncated;
  const std::string body = Stream(http::ApiKind::kChatCompletion, 2);
  truncated.Feed(std::string_view(body).substr(0, body.size() - 3), 0);  // "[DONE]" cut short
  CHECK_FALSE(truncated.done());
  CHECK_FALSE(truncated.failed());
}

}  // namespace
}  // namespace scd::loadgen
