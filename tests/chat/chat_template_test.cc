// Exact renderings of each chat template (the strings HF's apply_chat_template produces for the
// same conversations with add_generation_prompt=True), the error cases, and the token check
// against the bundled stories260K tokenizer.
#include "common/chat/chat_template.h"

#include <catch2/catch.hpp>

#include "tests/test_support.h"

namespace scd::chat {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "You are terse."},
    {"user", "Hi there"},
    {"assistant", "Hello."},
    {"user", "Who is Lily?"},
};

std::string MustRender(const std::string& name, const std::vector<ChatMessage>& messages) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::ByName(name);
  REQUIRE(t.ok());
  absl::StatusOr<std::string> out = t->Render(messages);
  INFO(out.status().ToString());
  REQUIRE(out.ok());
  return *out;
}

TEST_CASE("chatml rendering", "[cpu]") {
  CHECK(MustRender("chatml", kConversation) ==
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nWho is Lily?<|im_end|>\n"
        "<|im_start|>assistant\n");
  // Content is kept verbatim (no trimming).
  CHECK(MustRender("chatml", {{"user", " x \n"}}) ==
        "<|im_start|>user\n x \n<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("llama2 rendering", "[cpu]") {
  CHECK(MustRender("llama2", kConversation) ==
        "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST]"
        " Hello. </s>"
        "<s>[INST] Who is Lily? [/INST]");
  CHECK(MustRender("llama2", {{"user", "  Hi  "}}) == "<s>[INST] Hi [/INST]");
}

TEST_CASE("llama3 rendering", "[cpu]") {
  CHECK(MustRender("llama3", kConversation) ==
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWho is Lily?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(MustRender("llama3", {{"user", "\n hi \t"}}) ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST_CASE("plain rendering", "[cpu]") {
  CHECK(MustRender("plain", kConversation) ==
        "System: You are terse.\nUser: Hi there\nAssistant: Hello.\nUser: Who is Lily?\n"
        "Assistant:");
}

TEST_CASE("template properties", "[cpu]") {
  CHECK(TemplateNames() == std::vector<std::string>{"chatml", "llama2", "llama3", "plain"});
  CHECK(ChatTemplate::ByName("llama3")->renders_bos());
  CHECK(ChatTemplate::ByName("llama2")->renders_bos());
  CHECK_FALSE(ChatTemplate::ByName("chatml")->renders_bos());
  CHECK_FALSE(ChatTemplate::ByName("plain")->renders_bos());
  CHECK(ChatTemplate::ByName("chatml")->stop_strings() == std::vector<std::string>{"<|im_end|>"});
  CHECK(ChatTemplate::ByName("llama3")->stop_strings() == std::vector<std::string>{"<|eot_id|>"});
  CHECK(ChatTemplate::ByName("plain")->special_tokens().empty());
}

TEST_CASE("unknown template names and roles are errors", "[cpu]") {
  absl::StatusOr<ChatTemplate> unknown = ChatTemplate::ByName("vicuna");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(unknown.status().message().find("vicuna") != absl::string_view::npos);
  CHECK(unknown.status().message().find("chatml, llama2, llama3, plain") !=
        absl::string_view::npos);

  for (const std::string& name : TemplateNames()) {
    const ChatTemplate t = *ChatTemplate::ByName(name);
    absl::StatusOr<std::string> bad_role = t.Render({{"user", "a"}, {"tool", "b"}});
    REQUIRE_FALSE(bad_role.ok());
    CHECK(bad_role.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(bad_role.status().message().find("message 1: unknown role 'tool'") !=
          absl::string_view::npos);
    CHECK(t.Render({}).status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(IsKnownRole("assistant"));
  CHECK_FALSE(IsKnownRole("Assistant"));
}

TEST_CASE("llama2 rejects conversations it cannot express", "[cpu]") {
  const ChatTemplate t = *ChatTemplate::ByName("llama2");
  auto message_of = [&](const std::vector<ChatMessage>& messages) {
    absl::StatusOr<std::string> out = t.Render(messages);
    REQUIRE_FALSE(out.ok());
    CHECK(out.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(out.status().message());
  };
  CHECK(message_of({{"system", "s"}}).find("no user message") != std::string::npos);
  CHECK(message_of({{"user", "a"}, {"system", "s"}}).find("message 1") != std::string::npos);
  CHECK(message_of({{"user", "a"}, {"user", "b"}}).find("alternate") != std::string::npos);
  CHECK(message_of({{"assistant", "a"}}).find("alternate") != std::string::npos);
  CHECK(message_of({{"user", "a"}, {"assistant", "b"}}).find("end with a user") !=
        std::string::npos);
}

TEST_CASE("template tokens are checked against a tokenizer", "[cpu]") {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromFile(testing::SharedPath("models/stories260K/tokenizer.json"));
  REQUIRE(tokenizer.ok());
  // stories260K has <s> and </s> but no chat markers.
  CHECK(CheckTemplateTokens(*ChatTemplate::ByName("plain"), **tokenizer).ok());
  CHECK(CheckTemplateTokens(*ChatTemplate::ByName("llama2"), **tokenizer).ok());
  const absl::Status chatml = CheckTemplateTokens(*ChatTemplate::ByName("chatml"), **tokenizer);
  CHECK(chatml.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(chatml.message().find("<|im_start|>") != absl::string_view::npos);
  CHECK(CheckTemplateTokens(*ChatTemplate::ByName("llama3"), **tokenizer).code() ==
        absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace scd::chat
