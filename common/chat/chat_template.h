// Chat templates: turn a conversation of {role, content} messages into the single prompt
// string a causal LM continues, ending with the generation cue (the opening of the assistant's
// turn). A specialist's config names its template; the four we ship reproduce the Hugging Face
// chat templates of the model families they are named after, byte for byte:
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//   llama2  <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST]
//           ... [/INST]   (roles alternate user/assistant; system only first; ends with user)
//   llama3  <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//           ... <|start_header_id|>assistant<|end_header_id|>\n\n   (content trimmed)
//   plain   System: ...\nUser: ...\nAssistant: ...\nAssistant:   (for base models without chat
//           tokens, such as the bundled stories260K pair)
// Templates that spell BOS (llama2, llama3) must be tokenized without adding special tokens,
// as HF does after apply_chat_template; renders_bos() says which.
#ifndef SCD_COMMON_CHAT_CHAT_TEMPLATE_H_
#define SCD_COMMON_CHAT_CHAT_TEMPLATE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"

namespace scd::chat {

// One turn of a conversation. `role` is "system", "user" or "assistant".
struct ChatMessage {
  std::string role;
  std::string content;
};

// True for the roles every template understands.
bool IsKnownRole(std::string_view role);

// The template names ByName accepts, sorted.
std::vector<std::string> TemplateNames();

class ChatTemplate {
 public:
  // The template called `name`. InvalidArgument listing the known names otherwise.
  static absl::StatusOr<ChatTemplate> ByName(std::string_view name);

  const std::string& name() const { return name_; }

  // The prompt for `messages` followed by the generation cue. InvalidArgument, naming the
  // message index, for an empty conversation, an unknown role, or an order the template
  // cannot express (llama2: system not first, roles not alternating, last turn not the user's).
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages) const;

  // Whether Render's output begins with the BOS token's text.
  bool renders_bos() const;
  // The special tokens the rendering relies on; each must be a single token of the model's
  // tokenizer (see CheckTemplateTokens).
  std::vector<std::string> special_tokens() const;
  // Text that ends an assistant turn, to be added to a request's stop strings (EOS is honoured
  // separately by the decoder).
  std::vector<std::string> stop_strings() const;

 private:
  enum class Kind { kChatml, kLlama2, kLlama3, kPlain };
  ChatTemplate(Kind kind, std::string name) : kind_(kind), name_(std::move(name)) {}

  Kind kind_;
  std::string name_;
};

// OK when every special token of `chat_template` is one token of `tokenizer` (so the rendered
// markers are read as markers, not spelled out as text); FailedPrecondition naming the first
// missing token otherwise. Daemons call this once at start-up.
absl::Status CheckTemplateTokens(const ChatTemplate& chat_template, const Tokenizer& tokenizer);

}  // namespace scd::chat

#endif  // SCD_COMMON_CHAT_CHAT_TEMPLATE_H_
