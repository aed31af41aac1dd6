// The four chat templates (see chat_template.h). Each renderer follows the Jinja template of
// the family it is named after; comments quote the part of the original they implement.
#include "common/chat/chat_template.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace scd::chat {
namespace {

constexpr const char* kRoles[] = {"system", "user", "assistant"};

absl::Status CheckRoles(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) {
    return absl::InvalidArgumentError("a chat needs at least one message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!IsKnownRole(messages[i].role)) {
      return absl::InvalidArgumentError(absl::StrCat("message ", i, ": unknown role '",
                                                     messages[i].role,
                                                     "' (expected system, user or assistant)"));
    }
  }
  return absl::OkStatus();
}

// Python's str.strip() for the ASCII whitespace that Jinja's trim and strip remove in
// practice.
std::string Strip(const std::string& s) { return std::string(absl::StripAsciiWhitespace(s)); }

std::string RenderChatml(const std::vector<ChatMessage>& messages) {
  // {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
  std::string out;
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
  }
  out += "<|im_start|>assistant\n";
  return out;
}

absl::StatusOr<std::string> RenderLlama2(const std::vector<ChatMessage>& messages) {
  // A leading system message is folded into the first user turn:
  // '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content; the rest must alternate, user first.
  size_t first = 0;
  std::string system;
  bool has_system = false;
  if (messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    first = 1;
  }
  if (first == messages.size()) {
    return absl::InvalidArgumentError("llama2: the conversation has no user message");
  }
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool expect_user = (i - first) % 2 == 0;
    if (m.role == "system") {
      return absl::InvalidArgumentError(
          absl::StrCat("message ", i, ": llama2 allows a system message only first"));
    }
    if ((m.role == "user") != expect_user) {
      return absl::InvalidArgumentError(
          absl::StrCat("message ", i, ": llama2 roles must alternate user/assistant/user/... (got ",
                       m.role, ")"));
    }
    std::string content = m.content;
    if (i == first && has_system) {
      content = absl::StrCat("<<SYS>>\n", system, "\n<</SYS>>\n\n", m.content);
    }
    if (m.role == "user") {
      // bos_token + '[INST] ' + content.strip() + ' [/INST]'
      absl::StrAppend(&out, "<s>[INST] ", Strip(content), " [/INST]");
    } else {
      // ' ' + content.strip() + ' ' + eos_token
      absl::StrAppend(&out, " ", Strip(content), " </s>");
    }
  }
  if (messages.back().role != "user") {
    return absl::InvalidArgumentError(
        "llama2: the conversation must end with a user message (the template has no "
        "assistant cue)");
  }
  return out;
}

std::string RenderLlama3(const std::vector<ChatMessage>& messages) {
  // bos_token + per message: '<|start_header_id|>' + role + '<|end_header_id|>\n\n' +
  // content | trim + '<|eot_id|>'; cue: '<|start_header_id|>assistant<|end_header_id|>\n\n'.
  std::string out = "<|begin_of_text|>";
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", Strip(m.content),
                    "<|eot_id|>");
  }
  out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string RenderPlain(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    const char* label = m.role == "system" ? "System" : m.role == "user" ? "User" : "Assistant";
    absl::StrAppend(&out, label, ": ", m.content, "\n");
  }
  out += "Assistant:";
  return out;
}

}  // namespace

bool IsKnownRole(std::string_view role) {
  for (const char* known : kRoles) {
    if (role == known) return true;
  }
  return false;
}

std::vector<std::string> TemplateNames() { return {"chatml", "llama2", "llama3", "plain"}; }

absl::StatusOr<ChatTemplate> ChatTemplate::ByName(std::string_view name) {
  if (name == "chatml") return ChatTemplate(Kind::kChatml, "chatml");
  if (name == "llama2") return ChatTemplate(Kind::kLlama2, "llama2");
  if (name == "llama3") return ChatTemplate(Kind::kLlama3, "llama3");
  if (name == "plain") return ChatTemplate(Kind::kPlain, "plain");
  return absl::InvalidArgumentError(absl::StrCat("unknown chat template '", std::string(name),
                                                 "' (known: ", absl::StrJoin(TemplateNames(), ", "),
                                                 ")"));
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages) const {
  if (absl::Status s = CheckRoles(messages); !s.ok()) return s;
  switch (kind_) {
    case Kind::kChatml:
      return RenderChatml(messages);
    case Kind::kLlama2:
      return RenderLlama2(messages);
    case Kind::kLlama3:
      return RenderLlama3(messages);
    case Kind::kPlain:
      return RenderPlain(messages);
  }
  return absl::InternalError("unreachable chat template kind");
}

bool ChatTemplate::renders_bos() const { return kind_ == Kind::kLlama2 || kind_ == Kind::kLlama3; }

std::vector<std::string> ChatTemplate::special_tokens() const {
  switch (kind_) {
    case Kind::kChatml:
      return {"<|im_start|>", "<|im_end|>"};
    case Kind::kLlama2:
      return {"<s>", "</s>"};
    case Kind::kLlama3:
      return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case Kind::kPlain:
      return {};
  }
  return {};
}

std::vector<std::string> ChatTemplate::stop_strings() const {
  switch (kind_) {
    case Kind::kChatml:
      return {"<|im_end|>"};
    case Kind::kLlama2:
      return {"</s>"};
    case Kind::kLlama3:
      return {"<|eot_id|>"};
    case Kind::kPlain:
      // A base model continues the transcript with the next speaker's label.
      return {"\nUser:", "\nSystem:"};
  }
  return {};
}

absl::Status CheckTemplateTokens(const ChatTemplate& chat_template, const Tokenizer& tokenizer) {
  for (const std::string& token : chat_template.special_tokens()) {
    const int32_t id = tokenizer.TokenId(token);
    const std::vector<int32_t> encoded = tokenizer.Encode(token, /*add_special_tokens=*/false);
    if (id < 0 || encoded.size() != 1 || encoded[0] != id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "chat template '", chat_template.name(), "' needs '", token,
          "' to be one token, but the tokenizer ", id < 0 ? "has no such token" : "splits it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace scd::chat
