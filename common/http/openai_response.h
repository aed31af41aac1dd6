// OpenAI response bodies: `text_completion` and `chat.completion` objects, the streamed
// `text_completion` / `chat.completion.chunk` events, usage objects and the `/v1/models` list.
// The shapes follow the OpenAI API reference closely enough that the official clients parse
// them (the openai npm client is run against them in tests/http). Streaming follows OpenAI:
// a chat stream's first chunk carries delta.role = "assistant"; the chunk that ends the choice
// carries finish_reason and an empty delta; with stream_options.include_usage every chunk has
// "usage": null and one extra final chunk has "choices": [] and the usage. The SSE framing and
// the closing `data: [DONE]` are sse.h's job.
#ifndef SCD_COMMON_HTTP_OPENAI_RESPONSE_H_
#define SCD_COMMON_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace scd::http {

enum class FinishReason {
  kStop,    // EOS or a stop string
  kLength,  // max_tokens reached
};
const char* FinishReasonName(FinishReason reason);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
// {"prompt_tokens", "completion_tokens", "total_tokens"}
nlohmann::json UsageJson(const Usage& usage);

// What identifies one response; every chunk of a stream repeats it.
struct ResponseInfo {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  std::string model;    // as the request named it
  int64_t created = 0;  // Unix seconds
};

enum class ApiKind { kCompletion, kChatCompletion };

// A fresh ResponseInfo: id = "cmpl-" / "chatcmpl-" + 24 random alphanumerics, created = now.
ResponseInfo NewResponseInfo(ApiKind kind, std::string model);

// Non-streaming bodies with one choice.
nlohmann::json CompletionJson(const ResponseInfo& info, const std::string& text,
                              FinishReason finish, const Usage& usage);
nlohmann::json ChatCompletionJson(const ResponseInfo& info, const std::string& content,
                                  FinishReason finish, const Usage& usage);

// Builds the JSON payloads of one streamed choice, in order. Not thread-safe: one per stream.
class StreamEncoder {
 public:
  StreamEncoder(ApiKind kind, ResponseInfo info, bool include_usage);

  // The chunk carrying `text`. For chat, the first call's delta also carries the role.
  std::string Delta(std::string_view text);
  // The chunk with finish_reason, then (include_usage) the usage chunk. Call once, last.
  // `extension`, when not null, goes into the finishing chunk as its `scd` object.
  std::vector<std::string> Finish(FinishReason finish, const Usage& usage,
                                  const nlohmann::json& extension = nullptr);

  const ResponseInfo& info() const { return info_; }

  // A fan-out's choice (one specialist's answer): its chunks carry choice `index` and, in the
  // choice, the `model` that answers. Default: index 0, no model in the choice.
  void SetChoice(int index, std::string model);
  // The last chunk of a stream with stream_options.include_usage: no choices, `usage`.
  std::string UsageChunk(const Usage& usage) const;

 private:
  nlohmann::json Chunk(nlohmann::json choice) const;
  nlohmann::json Choice() const;

  ApiKind kind_;
  ResponseInfo info_;
  bool include_usage_;
  bool sent_role_ = false;
  int index_ = 0;
  std::string model_;
};

struct ModelCard {
  std::string id;
  int64_t created = 0;
  std::string owned_by = "scd-serve";
};
// {"id", "object": "model", "created", "owned_by"}: GET /v1/models/{id}.
nlohmann::json ModelJson(const ModelCard& model);
// {"object": "list", "data": [ModelJson, ...]}: GET /v1/models.
nlohmann::json ModelListJson(const std::vector<ModelCard>& models);

}  // namespace scd::http

#endif  // SCD_COMMON_HTTP_OPENAI_RESPONSE_H_
