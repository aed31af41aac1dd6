// The shared request-field checks (request_fields.h) that the OpenAI HTTP API and the gRPC
// Generation and Decode services all call: each range, the default budget, the budget against
// the context, and errors that name the field. tests/daemons checks that both front doors
// answer a bad field in the same words.
#include "common/http/request_fields.h"

#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "common/http/openai_api.h"
#include "common/http/openai_error.h"

namespace scd::http {
namespace {

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST_CASE("max_tokens: a given value in [1, limit], none given takes the default", "[cpu]") {
  RequestLimits limits;
  limits.max_tokens = 512;
  limits.default_max_tokens = 16;
  SamplingParams sampling;
  REQUIRE(ResolveMaxTokens("max_tokens", std::nullopt, limits, &sampling).ok());
  CHECK(sampling.max_tokens == 16);
  CHECK(sampling.max_tokens_field.empty());
  REQUIRE(ResolveMaxTokens("max_tokens", 512, limits, &sampling).ok());
  CHECK(sampling.max_tokens == 512);
  CHECK(sampling.max_tokens_field == "max_tokens");
  for (const int64_t bad : {int64_t{0}, int64_t{-3}, int64_t{513}}) {
    const absl::Status s = ResolveMaxTokens("max_completion_tokens", bad, limits, &sampling);
    CHECK(absl::IsInvalidArgument(s));
    CHECK(ErrorParam(s) == std::optional<std::string>("max_completion_tokens"));
    CHECK(Message(s) ==
          "Invalid 'max_completion_tokens': must be between 1 and 512, got " + std::to_string(bad));
  }
  limits.default_max_tokens = 1000;  // above the ceiling: the ceiling
  REQUIRE(ResolveMaxTokens("max_tokens", std::nullopt, limits, &sampling).ok());
  CHECK(sampling.max_tokens == 512);
  CHECK(sampling.max_tokens_field.empty());
}

TEST_CASE("max_tokens against the context: a given budget must fit, a default one is cut",
          "[cpu]") {
  RequestLimits limits;
  limits.max_tokens = 4096;
  limits.default_max_tokens = 256;
  SamplingParams given, chat, by_default;
  REQUIRE(ResolveMaxTokens("max_tokens", 200, limits, &given).ok());
  REQUIRE(ResolveMaxTokens("max_completion_tokens", 200, limits, &chat).ok());
  REQUIRE(ResolveMaxTokens("max_tokens", std::nullopt, limits, &by_default).ok());
  // Prompt + budget == context fits exactly.
  CHECK(FitMaxTokensToContext(given, 312, 512).value_or(0) == 200);
  // One token over: refused, naming the context, both numbers and their sum.
  const absl::StatusOr<int> over = FitMaxTokensToContext(given, 313, 512);
  REQUIRE(absl::IsInvalidArgument(over.status()));
  CHECK(ErrorCode(over.status()) == std::optional<std::string>("context_length_exceeded"));
  CHECK(Message(over.status()) ==
        "This model's maximum context length is 512 tokens; this request asks for 513 (313 in "
        "the prompt, 200 in max_tokens). Shorten the prompt or set max_tokens to at most 199.");
  CHECK_THAT(Message(FitMaxTokensToContext(chat, 400, 512).status()),
             Catch::Contains("200 in max_completion_tokens") &&
                 Catch::Contains("max_completion_tokens to at most 112"));
  // No budget given: the default, cut to the room the prompt leaves, as before.
  CHECK(FitMaxTokensToContext(by_default, 100, 512).value_or(0) == 256);
  CHECK(FitMaxTokensToContext(by_default, 400, 512).value_or(0) == 112);
  CHECK(FitMaxTokensToContext(by_default, 511, 512).value_or(0) == 1);
  // A prompt that fills the context leaves nothing to generate, budget or not.
  for (const SamplingParams& s : {given, by_default}) {
    const absl::StatusOr<int> full = FitMaxTokensToContext(s, 512, 512);
    CHECK(absl::IsInvalidArgument(full.status()));
    CHECK(ErrorCode(full.status()) == std::optional<std::string>("context_length_exceeded"));
    CHECK_THAT(Message(full.status()), Catch::Contains("maximum context length is 512") &&
                                           Catch::Contains("the prompt has 512 tokens"));
  }
}

TEST_CASE("Sampling fields: temperature, top_p, top_k", "[cpu]") {
  CHECK(CheckTemperature(0).ok());
  CHECK(CheckTemperature(2).ok());
  CHECK(Message(CheckTemperature(2.5)) ==
        "Invalid 'temperature': must be at least 0 and at most 2, got 2.5");
  CHECK(CheckTopP(1).ok());
  CHECK(Message(CheckTopP(0)) == "Invalid 'top_p': must be greater than 0 and at most 1, got 0");
  int top_k = 7;
  REQUIRE(CheckTopK(-1, &top_k).ok());
  CHECK(top_k == 0);  // off
  REQUIRE(CheckTopK(40, &top_k).ok());
  CHECK(top_k == 40);
  CHECK(Message(CheckTopK(-2, &top_k)) ==
        "Invalid 'top_k': must be between -1 and 2147483647, got -2");
}

TEST_CASE("stop, model, messages and roles", "[cpu]") {
  RequestLimits limits;
  CHECK(CheckStop({"a", "b"}, true, limits).ok());
  CHECK(ErrorParam(CheckStop({"a", ""}, true, limits)) == std::optional<std::string>("stop[1]"));
  CHECK(ErrorParam(CheckStop({""}, false, limits)) == std::optional<std::string>("stop"));
  CHECK(Message(CheckStop(std::vector<std::string>(5, "x"), true, limits)) ==
        "Invalid 'stop': at most 4 stop sequences are allowed, got 5");
  CHECK(Message(CheckModelName(std::string(300, 'm'), limits)) ==
        "Invalid 'model': longer than 256 bytes");
  CHECK(Message(CheckMessageCount(0, limits)) ==
        "Invalid 'messages': must contain at least one message");
  std::string role = "developer";
  REQUIRE(CheckRole("messages[0].role", &role).ok());
  CHECK(role == "system");
  role = "tool";
  CHECK(ErrorParam(CheckRole("messages[3].role", &role)) ==
        std::optional<std::string>("messages[3].role"));
}

TEST_CASE("The HTTP API's errors are the shared checks' errors", "[cpu]") {
  RequestLimits limits;
  limits.max_tokens = 512;
  const absl::StatusOr<CompletionRequest> r =
      ParseCompletionRequest(R"({"model": "m", "prompt": "hi", "max_tokens": 600})", limits);
  REQUIRE(!r.ok());
  SamplingParams sampling;
  CHECK(r.status() == ResolveMaxTokens("max_tokens", 600, limits, &sampling));
  int unused = 0;
  const absl::StatusOr<CompletionRequest> t =
      ParseCompletionRequest(R"({"model": "m", "prompt": "hi", "top_k": -5})", limits);
  REQUIRE(!t.ok());
  CHECK(t.status() == CheckTopK(-5, &unused));
}

}  // namespace
}  // namespace scd::http
