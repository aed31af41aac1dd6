// Workload inputs: prompt files (JSONL with prompt / messages / shared-prefix groups, plain
// text), their error messages with line numbers, synthetic prompts, request bodies and --url.
#include "common/tools/loadgen/workload.h"

#include <string>

#include "catch2/catch.hpp"
#include "common/tools/loadgen/stream_client.h"
#include "nlohmann/json.hpp"

namespace scd::loadgen {
namespace {

using Catch::Matchers::Contains;

std::string ErrorOf(std::string_view contents) {
  absl::StatusOr<std::vector<Prompt>> prompts = ParsePrompts(contents, "p.jsonl");
  REQUIRE_FALSE(prompts.ok());
  CHECK(prompts.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(prompts.status().message());
}

TEST_CASE("JSONL prompt files: prompt, messages and shared-prefix groups", "[cpu]") {
  const std::string contents =
      "{\"prompt\": \"Once upon a time\", \"max_tokens\": 7, \"id\": \"a\"}\n"
      "\n"
      "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
      " {\"role\": \"user\", \"content\": \"Hi\"}]}\r\n"
      "{\"context\": \"A long shared document.\", \"questions\": [\"Who?\", \"Why?\", \"When?\"],"
      " \"id\": 42}\n"
      "{\"prompt\": \"last\"}";  // no final newline
  absl::StatusOr<std::vector<Prompt>> prompts = ParsePrompts(contents, "p.jsonl");
  REQUIRE(prompts.ok());
  REQUIRE(prompts->size() == 6);
  const std::vector<Prompt>& p = *prompts;
  CHECK(p[0].text == "Once upon a time");
  CHECK(p[0].max_tokens == 7);
  CHECK(p[0].id == "a");
  CHECK(p[0].group == -1);
  REQUIRE(p[1].messages.size() == 2);
  CHECK(p[1].messages[0].role == "system");
  CHECK(p[1].messages[1].content == "Hi");
  CHECK(p[1].max_tokens == 0);
  for (int i = 2; i <= 4; ++i) {
    CHECK(p[i].group == 2);  // the third object
    CHECK(p[i].id == "42");
    CHECK(p[i].text.rfind("A long shared document.\n\n", 0) == 0);
  }
  CHECK(p[2].text == "A long shared document.\n\nWho?");
  CHECK(p[4].text == "A long shared document.\n\nWhen?");
  CHECK(p[5].text == "last");

  CHECK(CheckPromptsForApi(p, Api::kChat).ok());
  absl::Status completions = CheckPromptsForApi(p, Api::kCompletions);
  CHECK(completions.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(completions.message()), Contains("prompt 1"));
}

TEST_CASE("plain-text prompt files take every non-blank line literally", "[cpu]") {
  absl::StatusOr<std::vector<Prompt>> prompts =
      ParsePrompts("first prompt\n\n  second, {with braces}\r\n   \nthird", "p.txt");
  REQUIRE(prompts.ok());
  REQUIRE(prompts->size() == 3);
  CHECK((*prompts)[0].text == "first prompt");
  CHECK((*prompts)[1].text == "  second, {with braces}");
  CHECK((*prompts)[2].text == "third");
}

TEST_CASE("malformed prompt files fail with the file and line number", "[cpu]") {
  CHECK_THAT(ErrorOf("{\"prompt\": \"ok\"}\n\n{\"prompt\": \"unterminated}\n"),
             Contains("p.jsonl:3: not valid JSON"));
  CHECK_THAT(ErrorOf("{\"prompt\": \"ok\"}\n{\"max_token\": 5, \"prompt\": \"x\"}"),
             Contains("p.jsonl:2: unknown key \"max_token\""));
  CHECK_THAT(ErrorOf("{\"prompt\": \"a\", \"messages\": []}"),
             Contains("p.jsonl:1: needs exactly one"));
  CHECK_THAT(ErrorOf("{\"prompt\": \"\"}"), Contains("p.jsonl:1: \"prompt\" is empty"));
  CHECK_THAT(ErrorOf("{\"prompt\": 3}"), Contains("must be a string"));
  CHECK_THAT(ErrorOf("{\"prompt\": \"a\", \"max_tokens\": 0}"), Contains("positive integer"));
  CHECK_THAT(ErrorOf("{\"prompt\": \"a\", \"max_tokens\": 2.5}"), Contains("positive integer"));
  CHECK_THAT(ErrorOf("{\"messages\": [{\"role\": \"user\"}]}"), Contains("messages[0] must be"));
  CHECK_THAT(ErrorOf("{\"context\": \"c\"}"), Contains("go together"));
  CHECK_THAT(ErrorOf("{\"context\": \"c\", \"questions\": [\"q\", 5]}"),
             Contains("\"questions\"[1] must be a string"));
  CHECK_THAT(ErrorOf("{\"prompt\": \"a\"}\n[1, 2]"), Contains("p.jsonl:2: expected a JSON object"));
  CHECK_THAT(ErrorOf("\n  \n"), Contains("p.jsonl: no prompts"));
  CHECK(LoadPromptFile("/nonexistent/prompts.jsonl").status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("synthetic prompts are deterministic, distinct and about N words", "[cpu]") {
  absl::StatusOr<std::vector<Prompt>> a = SyntheticPrompts(20, 64, 7);
  absl::StatusOr<std::vector<Prompt>> b = SyntheticPrompts(20, 64, 7);
  absl::StatusOr<std::vector<Prompt>> c = SyntheticPrompts(20, 64, 8);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  REQUIRE(a->size() == 20);
  for (int i = 0; i < 20; ++i) {
    const std::string& text = (*a)[i].text;
    CHECK(text == (*b)[i].text);
    CHECK(text.rfind("Request " + std::to_string(i) + ":", 0) == 0);
    const auto words = std::count(text.begin(), text.end(), ' ') + 1;
    CHECK(words == 64);
  }
  CHECK((*a)[3].text != (*c)[3].text);
  CHECK_FALSE(SyntheticPrompts(0, 10, 1).ok());
  CHECK_FALSE(SyntheticPrompts(1, 0, 1).ok());
}

TEST_CASE("request bodies stream with usage and carry the prompt", "[cpu]") {
  Prompt prompt;
  prompt.text = "Hello";
  BodyOptions options;
  options.model = "m";
  options.max_tokens = 16;
  nlohmann::json chat = nlohmann::json::parse(RequestBody(prompt, options));
  CHECK(chat["model"] == "m");
  CHECK(chat["stream"] == true);
  CHECK(chat["stream_options"]["include_usage"] == true);
  CHECK(chat["max_tokens"] == 16);
  CHECK(chat["messages"] == nlohmann::json::parse(R"([{"role": "user", "content": "Hello"}])"));
  CHECK_FALSE(chat.contains("prompt"));

  prompt.max_tokens = 3;
  options.api = Api::kCompletions;
  options.extra_body = {{"temperature", 0}, {"stream", false}, {"max_tokens", 99}};
  nlohmann::json completion = nlohmann::json::parse(RequestBody(prompt, options));
  CHECK(completion["prompt"] == "Hello");
  CHECK_FALSE(completion.contains("messages"));
  CHECK(completion["temperature"] == 0);
  CHECK(completion["stream"] == true);    // never overridable
  CHECK(completion["max_tokens"] == 99);  // extra_body wins for other fields

  Prompt conversation;
  conversation.messages = {{"system", "S"}, {"user", "U"}};
  options.api = Api::kChat;
  options.extra_body = nlohmann::json::object();
  nlohmann::json multi = nlohmann::json::parse(RequestBody(conversation, options));
  CHECK(multi["messages"].size() == 2);
  CHECK(multi["messages"][0]["role"] == "system");
  CHECK(multi["max_tokens"] == 16);
}

TEST_CASE("--url parsing", "[cpu]") {
  absl::StatusOr<Target> plain = ParseUrl("http://127.0.0.1:8000");
  REQUIRE(plain.ok());
  CHECK(plain->base == "http://127.0.0.1:8000");
  CHECK(plain->path_prefix.empty());
  absl::StatusOr<Target> v1 = ParseUrl("https://api.example.com/v1/");
  REQUIRE(v1.ok());
  CHECK(v1->base == "https://api.example.com");
  CHECK(v1->path_prefix.empty());
  absl::StatusOr<Target> prefixed = ParseUrl("localhost:9000/gateway/v1");
  REQUIRE(prefixed.ok());
  CHECK(prefixed->base == "http://localhost:9000");
  CHECK(prefixed->path_prefix == "/gateway");
  CHECK(ParseUrl("http://[::1]:8080")->base == "http://[::1]:8080");
  CHECK_FALSE(ParseUrl("ftp://host:1").ok());
  CHECK_FALSE(ParseUrl("http://host:notaport").ok());
  CHECK_FALSE(ParseUrl("http://host:70000").ok());
  CHECK_FALSE(ParseUrl("http:///v1").ok());
}

}  // namespace
}  // namespace scd::loadgen
