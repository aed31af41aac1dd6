// Request parsing, error mapping, response builders and SSE framing, without a server.
#include "common/http/openai_api.h"

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "common/http/openai_error.h"
#include "common/http/openai_response.h"
#include "common/http/sse.h"

namespace scd::http {
namespace {

using nlohmann::json;

const RequestLimits kLimits;

// The parse error of `body` on /v1/completions, checked to be a 400 naming `param`.
std::string CompletionError(const std::string& body, const std::string& param) {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(body, kLimits);
  REQUIRE_FALSE(r.ok());
  INFO(r.status().ToString());
  CHECK(HttpStatusFor(r.status()) == 400);
  CHECK(ErrorParam(r.status()).value_or("<none>") == param);
  return std::string(r.status().message());
}

std::string ChatError(const std::string& body, const std::string& param) {
  absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(body, kLimits);
  REQUIRE_FALSE(r.ok());
  INFO(r.status().ToString());
  CHECK(HttpStatusFor(r.status()) == 400);
  CHECK(ErrorParam(r.status()).value_or("<none>") == param);
  return std::string(r.status().message());
}

TEST_CASE("completion request: every field", "[cpu]") {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(
      R"({"model": "babi", "prompt": ["Once upon"], "max_tokens": 32, "temperature": 0.5,
          "top_p": 0.9, "top_k": 40, "seed": -7, "stop": ["\n", "The end"], "stream": true,
          "stream_options": {"include_usage": true}, "n": 1, "echo": false, "user": "x",
          "logprobs": null, "presence_penalty": 0})",
      kLimits);
  REQUIRE(r.ok());
  CHECK(r->model == "babi");
  CHECK(r->prompt == "Once upon");
  CHECK(r->sampling.max_tokens == 32);
  CHECK(r->sampling.temperature == 0.5f);
  CHECK(r->sampling.top_p == 0.9f);
  CHECK(r->sampling.top_k == 40);
  CHECK(r->sampling.seed == int64_t{-7});
  CHECK(r->sampling.stop == std::vector<std::string>{"\n", "The end"});
  CHECK(r->stream);
  CHECK(r->include_usage);
}

TEST_CASE("completion request: defaults", "[cpu]") {
  absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(
      R"({"model": "m", "prompt": "hi", "stop": "x", "top_k": -1})", kLimits);
  REQUIRE(r.ok());
  CHECK(r->sampling.max_tokens == kLimits.default_max_tokens);
  CHECK(r->sampling.temperature == 1.0f);
  CHECK(r->sampling.top_p == 1.0f);
  CHECK(r->sampling.top_k == 0);
  CHECK_FALSE(r->sampling.seed.has_value());
  CHECK(r->sampling.stop == std::vector<std::string>{"x"});
  CHECK_FALSE(r->stream);
  CHECK_FALSE(r->include_usage);
}

TEST_CASE("completion request: errors name the field", "[cpu]") {
  CompletionError(R"({"prompt": "hi"})", "model");
  CompletionError(R"({"model": 3, "prompt": "hi"})", "model");
  CompletionError(R"({"model": "m"})", "prompt");
  CompletionError(R"({"model": "m", "prompt": ""})", "prompt");
  CompletionError(R"({"model": "m", "prompt": ["a", "b"]})", "prompt");
  CHECK(
      CompletionError(R"({"model": "m", "prompt": [[1, 2]]})", "prompt").find("must be a string") !=
      std::string::npos);
  CHECK(CompletionError(R"({"model": "m", "prompt": [1, 2]})", "prompt").find("batched") !=
        std::string::npos);
  CHECK(CompletionError(R"({"model": "m", "prompt": "hi", "max_tokens": 0})", "max_tokens")
            .find("between 1 and 4096") != std::string::npos);
  CompletionError(R"({"model": "m", "prompt": "hi", "max_tokens": 5000})", "max_tokens");
  CompletionError(R"({"model": "m", "prompt": "hi", "max_tokens": 2.5})", "max_tokens");
  CompletionError(R"({"model": "m", "prompt": "hi", "max_tokens": "9"})", "max_tokens");
  CompletionError(R"({"model": "m", "prompt": "hi", "temperature": 2.5})", "temperature");
  CompletionError(R"({"model": "m", "prompt": "hi", "temperature": -0.1})", "temperature");
  CompletionError(R"({"model": "m", "prompt": "hi", "top_p": 0})", "top_p");
  CompletionError(R"({"model": "m", "prompt": "hi", "top_k": -2})", "top_k");
  CompletionError(R"({"model": "m", "prompt": "hi", "seed": "1"})", "seed");
  CompletionError(R"({"model": "m", "prompt": "hi", "seed": 18446744073709551615})", "seed");
  CompletionError(R"({"model": "m", "prompt": "hi", "stop": 5})", "stop");
  CompletionError(R"({"model": "m", "prompt": "hi", "stop": ["a", 5]})", "stop[1]");
  CompletionError(R"({"model": "m", "prompt": "hi", "stop": [""]})", "stop[0]");
  CompletionError(R"({"model": "m", "prompt": "hi", "stop": ["a","b","c","d","e"]})", "stop");
  CompletionError(R"({"model": "m", "prompt": "hi", "stream": "yes"})", "stream");
  CompletionError(R"({"model": "m", "prompt": "hi", "stream_options": {"include_usage": true}})",
                  "stream_options");
  CompletionError(
      R"({"model": "m", "prompt": "hi", "stream": true, "stream_options": {"include_usage": 1}})",
      "stream_options.include_usage");
  CompletionError(R"({"model": "m", "prompt": "hi", "n": 2})", "n");
  CompletionError(R"({"model": "m", "prompt": "hi", "echo": true})", "echo");
  CompletionError(R"({"model": "m", "prompt": "hi", "best_of": 3})", "best_of");
  CompletionError(R"({"model": "m", "prompt": "hi", "logprobs": 2})", "logprobs");
  CompletionError(R"({"model": "m", "prompt": "hi", "suffix": "x"})", "suffix");
  CompletionError(R"({"model": "m", "prompt": "hi", "presence_penalty": 0.5})", "presence_penalty");
  CompletionError(R"({"model": "m", "prompt": "hi", "logit_bias": {"5": 1}})", "logit_bias");
}

TEST_CASE("malformed bodies", "[cpu]") {
  for (const std::string body : {"", "{", "[1, 2]", "\"text\"", "{\"model\": \"m\",}"}) {
    absl::StatusOr<CompletionRequest> r = ParseCompletionRequest(body, kLimits);
    REQUIRE_FALSE(r.ok());
    CHECK(HttpStatusFor(r.status()) == 400);
    CHECK(ErrorCode(r.status()) == std::optional<std::string>("invalid_json"));
  }
  // Invalid UTF-8 is a parse error, not a crash later when the text is echoed.
  CHECK_FALSE(ParseCompletionRequest("{\"model\": \"m\", \"prompt\": \"\xff\"}", kLimits).ok());
  // Deep nesting is rejected or parsed, never a stack overflow.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_FALSE(ParseCompletionRequest(deep, kLimits).ok());
}

TEST_CASE("limits are parameters", "[cpu]") {
  RequestLimits tight;
  tight.max_body_bytes = 64;
  tight.max_prompt_bytes = 8;
  tight.max_tokens = 10;
  tight.default_max_tokens = 100;  // clamped to max_tokens
  absl::StatusOr<CompletionRequest> big = ParseCompletionRequest(
      R"({"model": "m", "prompt": ")" + std::string(100, 'a') + "\"}", tight);
  REQUIRE_FALSE(big.ok());
  CHECK(HttpStatusFor(big.status()) == 413);
  absl::StatusOr<CompletionRequest> long_prompt =
      ParseCompletionRequest(R"({"model": "m", "prompt": "123456789"})", tight);
  REQUIRE_FALSE(long_prompt.ok());
  CHECK(ErrorParam(long_prompt.status()) == std::optional<std::string>("prompt"));
  absl::StatusOr<CompletionRequest> ok =
      ParseCompletionRequest(R"({"model": "m", "prompt": "12345678"})", tight);
  REQUIRE(ok.ok());
  CHECK(ok->sampling.max_tokens == 10);
}

TEST_CASE("chat request: messages and the max_completion_tokens alias", "[cpu]") {
  absl::StatusOr<ChatCompletionRequest> r = ParseChatCompletionRequest(
      R"({"model": "wiki", "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello "},
                                         {"type": "text", "text": "there"}], "name": "bob"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "More?"}],
          "max_completion_tokens": 7, "stream": true})",
      kLimits);
  REQUIRE(r.ok());
  CHECK(r->model == "wiki");
  REQUIRE(r->messages.size() == 4);
  CHECK(r->messages[0].role == "system");
  CHECK(r->messages[1].content == "Hello there");
  CHECK(r->messages[3].content == "More?");
  CHECK(r->sampling.max_tokens == 7);
  CHECK(r->stream);

  auto with_both = ParseChatCompletionRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
          "max_tokens": 5, "max_completion_tokens": 5})",
      kLimits);
  REQUIRE(with_both.ok());
  CHECK(with_both->sampling.max_tokens == 5);
}

TEST_CASE("chat request: errors name the field", "[cpu]") {
  ChatError(R"({"model": "m"})", "messages");
  ChatError(R"({"model": "m", "messages": []})", "messages");
  ChatError(R"({"model": "m", "messages": {}})", "messages");
  ChatError(R"({"model": "m", "messages": ["hi"]})", "messages[0]");
  ChatError(R"({"model": "m", "messages": [{"content": "hi"}]})", "messages[0].role");
  CHECK(ChatError(R"({"model": "m", "messages": [{"role": "user", "content": "a"},
                                                  {"role": "tool", "content": "b"}]})",
                  "messages[1].role")
            .find("'tool'") != std::string::npos);
  ChatError(R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content");
  ChatError(R"({"model": "m", "messages": [{"role": "user", "content": 5}]})",
            "messages[0].content");
  ChatError(R"({"model": "m", "messages": [{"role": "user", "content":
                 [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
            "messages[0].content[0]");
  ChatError(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 5, "max_completion_tokens": 6})",
            "max_completion_tokens");
  ChatError(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                "max_completion_tokens": 0})",
            "max_completion_tokens");
  ChatError(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function"}]})",
            "tools");
  ChatError(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": "json_object"}})",
            "response_format");
  RequestLimits tight;
  tight.max_prompt_bytes = 5;
  auto too_long = ParseChatCompletionRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "abc"},
                                      {"role": "user", "content": "def"}]})",
      tight);
  REQUIRE_FALSE(too_long.ok());
  CHECK(ErrorParam(too_long.status()) == std::optional<std::string>("messages"));
}

TEST_CASE("status to HTTP mapping and error bodies", "[cpu]") {
  CHECK(HttpStatusFor(absl::OkStatus()) == 200);
  CHECK(HttpStatusFor(absl::InvalidArgumentError("x")) == 400);
  CHECK(HttpStatusFor(absl::UnauthenticatedError("x")) == 401);
  CHECK(HttpStatusFor(absl::PermissionDeniedError("x")) == 403);
  CHECK(HttpStatusFor(absl::NotFoundError("x")) == 404);
  CHECK(HttpStatusFor(absl::ResourceExhaustedError("x")) == 429);
  CHECK(HttpStatusFor(absl::UnavailableError("x")) == 503);
  CHECK(HttpStatusFor(absl::DeadlineExceededError("x")) == 504);
  CHECK(HttpStatusFor(absl::InternalError("x")) == 500);
  CHECK(HttpStatusFor(absl::FailedPreconditionError("x")) == 500);
  CHECK(HttpStatusFor(absl::DataLossError("x")) == 500);
  CHECK(HttpStatusFor(WithHttpStatus(absl::InvalidArgumentError("x"), 413)) == 413);

  const HttpError field = ToHttpError(FieldError("temperature", "must be at most 2"));
  CHECK(field.status == 400);
  CHECK(json::parse(field.body) ==
        json::parse(R"({"error": {"message": "Invalid 'temperature': must be at most 2",
                                  "type": "invalid_request_error", "param": "temperature",
                                  "code": "invalid_argument"}})"));
  const HttpError missing = ToHttpError(
      WithErrorCode(absl::NotFoundError("The model 'x' does not exist"), "model_not_found"));
  CHECK(missing.status == 404);
  CHECK(json::parse(missing.body) ==
        json::parse(R"({"error": {"message": "The model 'x' does not exist",
                                  "type": "not_found_error", "param": null,
                                  "code": "model_not_found"}})"));
  CHECK(
      json::parse(ToHttpError(absl::ResourceExhaustedError("queue full")).body)["error"]["type"] ==
      "rate_limit_error");
  CHECK(json::parse(ToHttpError(absl::DeadlineExceededError("late")).body)["error"]["code"] ==
        "deadline_exceeded");
  // Invalid UTF-8 in a message cannot make the body unserialisable.
  CHECK_FALSE(ToHttpError(absl::InvalidArgumentError("bad \xff byte")).body.empty());
}

TEST_CASE("non-streaming response bodies", "[cpu]") {
  const ResponseInfo info{"cmpl-1", "babi", 1700000000};
  CHECK(CompletionJson(info, "Hi", FinishReason::kStop, Usage{5, 2}) ==
        json::parse(R"({"id": "cmpl-1", "object": "text_completion", "created": 1700000000,
                        "model": "babi", "choices": [{"index": 0, "text": "Hi",
                        "logprobs": null, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                  "total_tokens": 7}})"));
  CHECK(ChatCompletionJson(info, "Yo", FinishReason::kLength, Usage{3, 4}) ==
        json::parse(R"({"id": "cmpl-1", "object": "chat.completion", "created": 1700000000,
                        "model": "babi", "choices": [{"index": 0, "message":
                        {"role": "assistant", "content": "Yo"}, "logprobs": null,
                        "finish_reason": "length"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 4,
                                  "total_tokens": 7}})"));
  CHECK(ModelListJson({{"babi", 1, "scd-serve"}}) ==
        json::parse(R"({"object": "list", "data": [{"id": "babi", "object": "model",
                        "created": 1, "owned_by": "scd-serve"}]})"));
  const ResponseInfo fresh = NewResponseInfo(ApiKind::kChatCompletion, "m");
  CHECK(fresh.id.rfind("chatcmpl-", 0) == 0);
  CHECK(fresh.id.size() == 9 + 24);
  CHECK(fresh.created > 1700000000);
  CHECK(NewResponseInfo(ApiKind::kCompletion, "m").id.rfind("cmpl-", 0) == 0);
}

TEST_CASE("scd.fanout names several specialists", "[cpu]") {
  const RequestLimits limits;
  auto ok = ParseCompletionRequest(
      R"({"model": "a", "prompt": "x", "scd": {"fanout": ["a", "b"], "mode": "scd"}})", limits);
  REQUIRE(ok.ok());
  CHECK(ok->scd.fanout == std::vector<std::string>{"a", "b"});
  CHECK(ok->scd.mode == "scd");
  for (const char* bad : {R"({"fanout": "a"})", R"({"fanout": []})", R"({"fanout": ["a", "a"]})",
                          R"({"fanout": ["a", 3]})", R"({"fanout": ["a", ""]})"}) {
    INFO(bad);
    auto r = ParseCompletionRequest(
        absl::StrCat(R"({"model": "a", "prompt": "x", "scd": )", bad, "}"), limits);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("scd.fanout"));
  }
  // A fan-out's stream chunks carry the choice's index and model.
  StreamEncoder second(ApiKind::kCompletion, ResponseInfo{"cmpl-3", "a", 1}, false);
  second.SetChoice(1, "b");
  const json chunk = json::parse(second.Delta("x"));
  CHECK(chunk["model"] == "a");
  CHECK(chunk["choices"][0]["index"] == 1);
  CHECK(chunk["choices"][0]["model"] == "b");
  CHECK(json::parse(second.UsageChunk(Usage{3, 4}))["usage"]["total_tokens"] == 7);
}

TEST_CASE("stream chunks", "[cpu]") {
  const ResponseInfo info{"chatcmpl-1", "m", 1};
  StreamEncoder chat(ApiKind::kChatCompletion, info, /*include_usage=*/true);
  const json first = json::parse(chat.Delta("Hel"));
  CHECK(first ==
        json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                        "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant",
                        "content": "Hel"}, "logprobs": null, "finish_reason": null}],
                        "usage": null})"));
  CHECK(json::parse(chat.Delta("lo"))["choices"][0]["delta"] == json{{"content", "lo"}});
  const std::vector<std::string> end = chat.Finish(FinishReason::kStop, Usage{4, 2});
  REQUIRE(end.size() == 2);
  const json finish = json::parse(end[0]);
  CHECK(finish["choices"][0]["finish_reason"] == "stop");
  CHECK(finish["choices"][0]["delta"] == json::object());
  CHECK(finish["usage"].is_null());
  CHECK(json::parse(end[1]) ==
        json::parse(R"({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                        "model": "m", "choices": [], "usage": {"prompt_tokens": 4,
                        "completion_tokens": 2, "total_tokens": 6}})"));

  StreamEncoder text(ApiKind::kCompletion, ResponseInfo{"cmpl-2", "m", 1}, false);
  const json chunk = json::parse(text.Delta(" w0"));
  CHECK(chunk["object"] == "text_completion");
  CHECK(chunk["choices"][0]["text"] == " w0");
  CHECK_FALSE(chunk.contains("usage"));
  const std::vector<std::string> text_end = text.Finish(FinishReason::kLength, Usage{});
  REQUIRE(text_end.size() == 1);
  CHECK(json::parse(text_end[0])["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("SSE framing and parsing", "[cpu]") {
  CHECK(SseEvent("{\"a\":1}") == "data: {\"a\":1}\n\n");
  CHECK(SseEvent("two\nlines") == "data: two\ndata: lines\n\n");
  CHECK(SseEvent(kSseDonePayload) == "data: [DONE]\n\n");
  CHECK(SseComment("keep\nalive") == ": keep alive\n\n");

  const std::string wire = SseEvent("one") + SseComment("ping") + "event: x\nid: 3\n" +
                           SseEvent("two\nlines") + "data:nospace\r\n\r\n" + SseEvent("[DONE]");
  // Any split of the byte stream gives the same events.
  for (size_t piece : {size_t{1}, size_t{2}, size_t{7}, wire.size()}) {
    SseParser parser;
    std::vector<std::string> events;
    for (size_t i = 0; i < wire.size(); i += piece) {
      for (std::string& e : parser.Feed(std::string_view(wire).substr(i, piece))) {
        events.push_back(std::move(e));
      }
    }
    CHECK(events == std::vector<std::string>{"one", "two\nlines", "nospace", "[DONE]"});
  }
}

}  // namespace
}  // namespace scd::http
