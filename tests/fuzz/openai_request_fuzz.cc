// Fuzzes the HTTP request-body parser (common/http/openai_api.h): an OpenAI JSON body into our
// CompletionRequest and ChatCompletionRequest. The input is the body, tried as both endpoints.
// Limits are small so that the fuzzer reaches every bound. What the header promises of an
// accepted request is checked (every field in range), and an accepted conversation is
// rendered with every chat template, as the prefill daemon does next.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/chat/chat_template.h"
#include "common/http/openai_api.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

scd::http::RequestLimits Limits() {
  scd::http::RequestLimits limits;
  limits.max_body_bytes = 16 << 10;
  limits.max_tokens = 512;
  limits.default_max_tokens = 64;
  limits.max_prompt_bytes = 2048;
  limits.max_messages = 16;
  limits.max_stop_bytes = 32;
  limits.max_model_name_bytes = 64;
  return limits;
}

void CheckSampling(const scd::http::SamplingParams& s, const scd::http::RequestLimits& limits) {
  FUZZ_CHECK(s.max_tokens >= 1 && s.max_tokens <= limits.max_tokens);
  FUZZ_CHECK(s.temperature >= 0.0f && s.temperature <= 2.0f);
  FUZZ_CHECK(s.top_p > 0.0f && s.top_p <= 1.0f);
  FUZZ_CHECK(s.top_k >= 0);
  FUZZ_CHECK(s.stop.size() <= limits.max_stop_sequences);
  for (const std::string& stop : s.stop) {
    FUZZ_CHECK(!stop.empty() && stop.size() <= limits.max_stop_bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const scd::http::RequestLimits limits = Limits();
  const std::string_view body(reinterpret_cast<const char*>(data), size);

  auto completion = scd::http::ParseCompletionRequest(body, limits);
  if (completion.ok()) {
    FUZZ_CHECK(!completion->model.empty());
    FUZZ_CHECK(completion->model.size() <= limits.max_model_name_bytes);
    FUZZ_CHECK(!completion->prompt.empty());
    FUZZ_CHECK(completion->prompt.size() <= limits.max_prompt_bytes);
    CheckSampling(completion->sampling, limits);
  }

  auto chat = scd::http::ParseChatCompletionRequest(body, limits);
  if (chat.ok()) {
    FUZZ_CHECK(!chat->messages.empty() && chat->messages.size() <= limits.max_messages);
    size_t total = 0;
    for (const scd::chat::ChatMessage& m : chat->messages) {
      FUZZ_CHECK(scd::chat::IsKnownRole(m.role));
      total += m.content.size();
    }
    FUZZ_CHECK(total <= limits.max_prompt_bytes);
    CheckSampling(chat->sampling, limits);
    for (const std::string& name : scd::chat::TemplateNames()) {
      auto chat_template = scd::chat::ChatTemplate::ByName(name);
      FUZZ_CHECK(chat_template.ok());
      (void)chat_template->Render(chat->messages);
    }
  }
  return 0;
}
