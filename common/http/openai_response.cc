// OpenAI response bodies and stream chunks (see openai_response.h).
#include "common/http/openai_response.h"

#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "common/http/openai_error.h"

namespace scd::http {
namespace {

using nlohmann::json;

std::string RandomAlphanumeric(size_t n) {
  static constexpr char kAlphabet[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string out(n, '0');
  for (char& c : out) c = kAlphabet[pick(rng)];
  return out;
}

const char* ObjectName(ApiKind kind, bool chunk) {
  if (kind == ApiKind::kCompletion) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json Envelope(const ResponseInfo& info, const char* object) {
  return json{
      {"id", info.id}, {"object", object}, {"created", info.created}, {"model", info.model}};
}

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

json UsageJson(const Usage& usage) {
  return json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

ResponseInfo NewResponseInfo(ApiKind kind, std::string model) {
  ResponseInfo info;
  info.id = (kind == ApiKind::kCompletion ? "cmpl-" : "chatcmpl-") + RandomAlphanumeric(24);
  info.model = std::move(model);
  info.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  return info;
}

json CompletionJson(const ResponseInfo& info, const std::string& text, FinishReason finish,
                    const Usage& usage) {
  json body = Envelope(info, ObjectName(ApiKind::kCompletion, false));
  body["choices"] = json::array({json{{"index", 0},
                                      {"text", text},
                                      {"logprobs", nullptr},
                                      {"finish_reason", FinishReasonName(finish)}}});
  body["usage"] = UsageJson(usage);
  return body;
}

json ChatCompletionJson(const ResponseInfo& info, const std::string& content, FinishReason finish,
                        const Usage& usage) {
  json body = Envelope(info, ObjectName(ApiKind::kChatCompletion, false));
  body["choices"] =
      json::array({json{{"index", 0},
                        {"message", json{{"role", "assistant"}, {"content", content}}},
                        {"logprobs", nullptr},
                        {"finish_reason", FinishReasonName(finish)}}});
  body["usage"] = UsageJson(usage);
  return body;
}

StreamEncoder::StreamEncoder(ApiKind kind, ResponseInfo info, bool include_usage)
    : kind_(kind), info_(std::move(info)), include_usage_(include_usage) {}

json StreamEncoder::Chunk(json choice) const {
  json chunk = Envelope(info_, ObjectName(kind_, true));
  chunk["choices"] = json::array({std::move(choice)});
  if (include_usage_) chunk["usage"] = nullptr;
  return chunk;
}

void StreamEncoder::SetChoice(int index, std::string model) {
  index_ = index;
  model_ = std::move(model);
}

json StreamEncoder::Choice() const {
  json choice{{"index", index_}, {"logprobs", nullptr}};
  if (!model_.empty()) choice["model"] = model_;
  return choice;
}

std::string StreamEncoder::UsageChunk(const Usage& usage) const {
  json last = Envelope(info_, ObjectName(kind_, true));
  last["choices"] = json::array();
  last["usage"] = UsageJson(usage);
  return DumpJson(last);
}

std::string StreamEncoder::Delta(std::string_view text) {
  json choice = Choice();
  choice["finish_reason"] = nullptr;
  if (kind_ == ApiKind::kCompletion) {
    choice["text"] = std::string(text);
  } else {
    json delta{{"content", std::string(text)}};
    if (!sent_role_) delta["role"] = "assistant";
    sent_role_ = true;
    choice["delta"] = std::move(delta);
  }
  return DumpJson(Chunk(std::move(choice)));
}

std::vector<std::string> StreamEncoder::Finish(FinishReason finish, const Usage& usage,
                                               const json& extension) {
  json choice = Choice();
  choice["finish_reason"] = FinishReasonName(finish);
  if (kind_ == ApiKind::kCompletion) {
    choice["text"] = "";
  } else {
    json delta = json::object();
    if (!sent_role_) delta["role"] = "assistant";
    sent_role_ = true;
    choice["delta"] = std::move(delta);
  }
  json chunk = Chunk(std::move(choice));
  if (!extension.is_null()) chunk["scd"] = extension;
  std::vector<std::string> payloads = {DumpJson(chunk)};
  if (include_usage_) payloads.push_back(UsageChunk(usage));
  return payloads;
}

json ModelJson(const ModelCard& m) {
  return json{{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", m.owned_by}};
}

json ModelListJson(const std::vector<ModelCard>& models) {
  json data = json::array();
  for (const ModelCard& m : models) data.push_back(ModelJson(m));
  return json{{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace scd::http
