// The prefill daemon's front doors against the real pair: a body that is not sent as JSON gets
// 415; a max_tokens that does not fit beside the prompt in the model's context is refused in
// the same words by HTTP (400) and gRPC (INVALID_ARGUMENT), while a request that gives none
// gets the rest of the context; both APIs hand out request ids of one format.
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <catch2/catch.hpp>
#include <optional>
#include <regex>
#include <string>

#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;

constexpr char kPrompt[] =
    "Mary moved to the bathroom. John went to the hallway. Sandra moved to the garden. "
    "Q: Where is Mary? A:";

json Completion(std::optional<int> max_tokens) {
  json body = {{"model", kModel}, {"prompt", kPrompt}, {"temperature", 0}};
  if (max_tokens.has_value()) body["max_tokens"] = *max_tokens;
  return body;
}

scd::v1::GenerateRequest GrpcCompletion(int max_tokens) {
  scd::v1::GenerateRequest r;
  r.set_model(kModel);
  r.set_prompt(kPrompt);
  r.set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

// POST with `content_type` as given (none when empty).
httplib::Result PostAs(int port, const std::string& path, const std::string& body,
                       const std::string& content_type) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::seconds(30));
  return client.Post(path, body, content_type);
}

// A context length: the model's max_position_embeddings.
int ContextLength(const std::string& model) {
  const json config = json::parse(ReadFileOrFail(ModelDir(model) + "/config.json"));
  return config["max_position_embeddings"].get<int>();
}

// Content-Type: application/json, with parameters and in any case; nothing else.
void CheckContentTypes(int port) {
  const std::string body = Completion(4).dump();
  for (const char* type : {"application/json; charset=utf-8", "Application/JSON"}) {
    INFO(type);
    CHECK(PostAs(port, "/v1/completions", body, type)->status == 200);
  }
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    for (const char* type : {"text/plain", "application/x-www-form-urlencoded", ""}) {
      INFO(path << " '" << type << "'");
      httplib::Result r = PostAs(port, path, body, type);
      REQUIRE(r);
      CHECK(r->status == 415);
      CHECK(ErrorOf(r->body)["code"] == "unsupported_media_type");
      CHECK_THAT(ErrorOf(r->body)["message"].get<std::string>(),
                 Catch::Contains("application/json"));
    }
  }
}

// A budget that fits exactly is served; one more token is refused, naming both numbers, in the
// same words by HTTP and gRPC.
void CheckContextBudget(const PrefillHandle& prefill, int context, int prompt_tokens) {
  const int port = prefill.http_port;
  const int room = context - prompt_tokens;
  CHECK(HttpPost(port, "/v1/completions", Completion(room).dump()).status == 200);
  const HttpResult http = HttpPost(port, "/v1/completions", Completion(room + 1).dump());
  const GrpcOutcome grpc = GrpcGenerate(prefill.grpc_address, GrpcCompletion(room + 1));
  INFO(http.body);
  CHECK(http.status == 400);
  const json error = ErrorOf(http.body);
  CHECK(error["code"] == "context_length_exceeded");
  const std::string message = error["message"];
  CHECK_THAT(message, Catch::Contains(std::to_string(context) + " tokens") &&
                          Catch::Contains(std::to_string(prompt_tokens) + " in the prompt") &&
                          Catch::Contains(std::to_string(room + 1) + " in max_tokens"));
  CHECK(grpc.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(grpc.status.error_message() == message);
  // The chat API names its own budget field.
  json chat = {{"model", kModel},
               {"messages", {{{"role", "user"}, {"content", kPrompt}}}},
               {"max_completion_tokens", context}};
  const HttpResult c = HttpPost(port, "/v1/chat/completions", chat.dump());
  CHECK(c.status == 400);
  CHECK_THAT(ErrorOf(c.body)["message"].get<std::string>(),
             Catch::Contains("in max_completion_tokens"));
}

// No max_tokens: the default (512 here) is cut to the rest of the context, not refused.
void CheckDefaultBudget(const PrefillHandle& prefill, int context, int prompt_tokens) {
  const int port = prefill.http_port;
  const HttpResult r = HttpPost(port, "/v1/completions", Completion(std::nullopt).dump());
  INFO(r.body);
  REQUIRE(r.status == 200);
  const json usage = json::parse(r.body)["usage"];
  CHECK(usage["prompt_tokens"] == prompt_tokens);
  CHECK(usage["completion_tokens"].get<int>() >= 1);
  CHECK(usage["completion_tokens"].get<int>() <= context - prompt_tokens);
  const GrpcOutcome g = GrpcGenerate(prefill.grpc_address, GrpcCompletion(0));  // 0: none
  CHECK(g.status.ok());
}

// Request ids: one format, 32 lowercase hex characters, on both APIs.
void CheckRequestIds(const PrefillHandle& prefill) {
  const int port = prefill.http_port;
  const std::regex format("^[0-9a-f]{32}$");
  const HttpResult http = HttpPost(port, "/v1/completions", Completion(2).dump());
  const GrpcOutcome grpc = GrpcGenerate(prefill.grpc_address, GrpcCompletion(2));
  REQUIRE(grpc.status.ok());
  const std::string http_id =
      http.headers.count("x-request-id") ? http.headers.at("x-request-id") : "";
  INFO("HTTP " << http_id << ", gRPC " << grpc.request_id);
  CHECK(std::regex_match(http_id, format));
  CHECK(std::regex_match(grpc.request_id, format));
  CHECK(grpc.events.back().done().request_id() == grpc.request_id);
  CHECK(http_id != grpc.request_id);
}

}  // namespace

TEST_CASE("The prefill daemon's front doors: Content-Type, the context budget, request ids",
          "[daemons]") {
  const std::string dir = TempDir();
  json pc = PrefillConfig("scd");
  pc["limits"]["default_max_tokens"] = 512;  // more than any prompt leaves room for
  PrefillHandle prefill = StartPrefill(dir, pc);
  DecodeHandle decode = StartDecode(dir, DecodeConfig(prefill.grpc_address));
  REQUIRE(WaitForReady(prefill.http_port, 200, std::chrono::seconds(10)));
  const int port = prefill.http_port;

  CheckContentTypes(port);

  const int context = ContextLength("stories260K");
  HttpResult probe = HttpPost(port, "/v1/completions", Completion(1).dump());
  REQUIRE(probe.status == 200);
  const int prompt_tokens = json::parse(probe.body)["usage"]["prompt_tokens"].get<int>();
  REQUIRE(prompt_tokens + 2 < context);
  CheckContextBudget(prefill, context, prompt_tokens);
  CheckDefaultBudget(prefill, context, prompt_tokens);
  CheckRequestIds(prefill);
}

}  // namespace scd::testing
