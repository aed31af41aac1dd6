// Request parsing for the OpenAI endpoints (see openai_api.h). Each field has one reader that
// checks its JSON type and range and returns a FieldError naming it, so every 400 says
// exactly which field is wrong and why.
#include "common/http/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http/openai_error.h"
#include "common/http/request_fields.h"
#include "nlohmann/json.hpp"

namespace scd::http {
namespace {

using nlohmann::json;

// The value of `key`, or nullptr when it is absent or null.
const json* Find(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<json> ParseObject(std::string_view body, const RequestLimits& limits) {
  if (body.size() > limits.max_body_bytes) {
    return WithHttpStatus(absl::InvalidArgumentError(absl::StrCat("Request body of ", body.size(),
                                                                  " bytes exceeds the limit of ",
                                                                  limits.max_body_bytes, " bytes")),
                          413);
  }
  json parsed;
  try {
    parsed = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    return WithErrorCode(
        absl::InvalidArgumentError(absl::StrCat("Request body is not valid JSON: ", e.what())),
        "invalid_json");
  }
  if (!parsed.is_object()) {
    return WithErrorCode(absl::InvalidArgumentError("Request body must be a JSON object"),
                         "invalid_json");
  }
  return parsed;
}

absl::Status ReadModel(const json& body, const RequestLimits& limits, std::string* model) {
  const json* v = Find(body, "model");
  if (v == nullptr) return FieldError("model", "a model name is required");
  if (!v->is_string()) return FieldError("model", "must be a string");
  *model = v->get<std::string>();
  return CheckModelName(*model, limits);
}

// An integer field (integral floats such as 5.0 are accepted) in [min, max].
absl::Status ReadInt(const json& body, const char* key, int64_t min, int64_t max,
                     std::optional<int64_t>* out) {
  const json* v = Find(body, key);
  if (v == nullptr) return absl::OkStatus();
  int64_t value = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(key, "integer out of range");
    }
    value = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    value = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!(d == std::floor(d)) || std::fabs(d) > 9.0e15) {
      return FieldError(key, "must be an integer");
    }
    value = static_cast<int64_t>(d);
  } else {
    return FieldError(key, "must be an integer");
  }
  if (value < min || value > max) {
    return FieldError(key, absl::StrCat("must be between ", min, " and ", max, ", got ", value));
  }
  *out = value;
  return absl::OkStatus();
}

// A number field, range-checked by `check` (request_fields.h).
absl::Status ReadNumber(const json& body, const char* key, absl::Status (*check)(double),
                        float* out) {
  const json* v = Find(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return FieldError(key, "must be a number");
  const double value = v->get<double>();
  if (absl::Status s = check(value); !s.ok()) return s;
  *out = static_cast<float>(value);
  return absl::OkStatus();
}

absl::Status ReadBool(const json& body, const char* key, bool* out) {
  const json* v = Find(body, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return FieldError(key, "must be a boolean");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadStop(const json& body, const RequestLimits& limits,
                      std::vector<std::string>* stop) {
  const json* v = Find(body, "stop");
  if (v == nullptr) return absl::OkStatus();
  std::vector<const json*> items;
  if (v->is_string()) {
    items.push_back(v);
  } else if (v->is_array()) {
    for (const json& item : *v) items.push_back(&item);
  } else {
    return FieldError("stop", "must be a string or an array of strings");
  }
  if (items.size() > limits.max_stop_sequences) {
    return CheckStop(std::vector<std::string>(items.size()), v->is_array(), limits);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string param = v->is_array() ? absl::StrCat("stop[", i, "]") : "stop";
    if (!items[i]->is_string()) return FieldError(param, "must be a string");
    stop->push_back(items[i]->get<std::string>());
  }
  return CheckStop(*stop, v->is_array(), limits);
}

// Rejects fields we cannot honour unless they hold their default value.
absl::Status RejectUnsupported(const json& body) {
  struct Rule {
    const char* key;
    bool (*is_default)(const json&);
    const char* why;
  };
  static const Rule kRules[] = {
      {"n", [](const json& v) { return v.is_number() && v.get<double>() == 1; },
       "only n=1 is supported"},
      {"best_of", [](const json& v) { return v.is_number() && v.get<double>() == 1; },
       "only best_of=1 is supported"},
      {"echo", [](const json& v) { return v.is_boolean() && !v.get<bool>(); },
       "echo is not supported"},
      {"logprobs",
       [](const json& v) {
         return (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0);
       },
       "logprobs are not supported"},
      {"top_logprobs", [](const json& v) { return v.is_number() && v.get<double>() == 0; },
       "logprobs are not supported"},
      {"suffix", [](const json& v) { return v.is_string() && v.get<std::string>().empty(); },
       "suffix is not supported"},
      {"logit_bias", [](const json& v) { return v.is_object() && v.empty(); },
       "logit_bias is not supported"},
      {"presence_penalty", [](const json& v) { return v.is_number() && v.get<double>() == 0; },
       "presence_penalty is not supported (must be 0)"},
      {"frequency_penalty", [](const json& v) { return v.is_number() && v.get<double>() == 0; },
       "frequency_penalty is not supported (must be 0)"},
      {"tools", [](const json& v) { return v.is_array() && v.empty(); }, "tools are not supported"},
      {"tool_choice", [](const json& v) { return v.is_string() && v.get<std::string>() == "none"; },
       "tools are not supported"},
      {"functions", [](const json& v) { return v.is_array() && v.empty(); },
       "functions are not supported"},
      {"function_call",
       [](const json& v) { return v.is_string() && v.get<std::string>() == "none"; },
       "functions are not supported"},
      {"response_format",
       [](const json& v) { return v.is_object() && v.value("type", "") == "text"; },
       "only response_format {\"type\": \"text\"} is supported"},
  };
  for (const Rule& rule : kRules) {
    const json* v = Find(body, rule.key);
    if (v != nullptr && !rule.is_default(*v)) return FieldError(rule.key, rule.why);
  }
  return absl::OkStatus();
}

// Sampling fields and stream flags common to both endpoints. `max_tokens_key` is the field
// that was given for the token budget (for error messages).
absl::Status ReadCommon(const json& body, const RequestLimits& limits, const char* max_tokens_key,
                        SamplingParams* sampling, bool* stream, bool* include_usage) {
  if (absl::Status s = RejectUnsupported(body); !s.ok()) return s;
  std::optional<int64_t> max_tokens;
  // ReadInt checks the JSON type alone; the ranges are the shared checks'.
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (absl::Status s = ReadInt(body, max_tokens_key, kMin, kMax, &max_tokens); !s.ok()) return s;
  if (absl::Status s = ResolveMaxTokens(max_tokens_key, max_tokens, limits, sampling); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadNumber(body, "temperature", CheckTemperature, &sampling->temperature);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadNumber(body, "top_p", CheckTopP, &sampling->top_p); !s.ok()) return s;
  std::optional<int64_t> top_k;
  if (absl::Status s = ReadInt(body, "top_k", kMin, kMax, &top_k); !s.ok()) return s;
  if (top_k.has_value()) {
    if (absl::Status s = CheckTopK(*top_k, &sampling->top_k); !s.ok()) return s;
  }
  if (absl::Status s = ReadInt(body, "seed", std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max(), &sampling->seed);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadStop(body, limits, &sampling->stop); !s.ok()) return s;
  if (absl::Status s = ReadBool(body, "stream", stream); !s.ok()) return s;
  if (const json* options = Find(body, "stream_options")) {
    if (!options->is_object()) return FieldError("stream_options", "must be an object");
    if (!*stream) return FieldError("stream_options", "is only allowed when stream is true");
    if (absl::Status s = ReadBool(*options, "include_usage", include_usage); !s.ok()) {
      return FieldError("stream_options.include_usage", "must be a boolean");
    }
  }
  return absl::OkStatus();
}

absl::Status ReadPrompt(const json& body, const RequestLimits& limits, std::string* prompt) {
  const json* v = Find(body, "prompt");
  if (v == nullptr) return FieldError("prompt", "a prompt is required");
  const json* text = v;
  if (v->is_array()) {
    if (v->size() != 1) {
      return FieldError("prompt", "batched prompts are not supported; give one string");
    }
    text = &(*v)[0];
    if (text->is_number_integer()) {
      return FieldError("prompt", "token-id prompts are not supported; give a string");
    }
  }
  if (!text->is_string()) return FieldError("prompt", "must be a string");
  *prompt = text->get<std::string>();
  if (prompt->empty()) return FieldError("prompt", "must not be empty");
  if (prompt->size() > limits.max_prompt_bytes) {
    return FieldError("prompt", absl::StrCat("is ", prompt->size(), " bytes, over the limit of ",
                                             limits.max_prompt_bytes));
  }
  return absl::OkStatus();
}

absl::Status ReadContent(const json& v, const std::string& param, std::string* content) {
  if (v.is_string()) {
    *content = v.get<std::string>();
    return absl::OkStatus();
  }
  if (!v.is_array()) return FieldError(param, "must be a string or an array of text parts");
  content->clear();
  for (size_t j = 0; j < v.size(); ++j) {
    const json& part = v[j];
    const std::string part_param = absl::StrCat(param, "[", j, "]");
    if (!part.is_object() || part.value("type", json()) != "text") {
      return FieldError(part_param, "only {\"type\": \"text\"} content parts are supported");
    }
    const json* text = Find(part, "text");
    if (text == nullptr || !text->is_string()) {
      return FieldError(part_param + ".text", "must be a string");
    }
    *content += text->get<std::string>();
  }
  return absl::OkStatus();
}

absl::Status ReadMessages(const json& body, const RequestLimits& limits,
                          std::vector<chat::ChatMessage>* messages) {
  const json* v = Find(body, "messages");
  if (v == nullptr) return FieldError("messages", "a messages array is required");
  if (!v->is_array()) return FieldError("messages", "must be an array");
  if (absl::Status s = CheckMessageCount(v->size(), limits); !s.ok()) return s;
  size_t total_bytes = 0;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string param = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return FieldError(param, "must be an object");
    const json* role = Find(m, "role");
    if (role == nullptr || !role->is_string())
      return FieldError(param + ".role", "must be a string");
    chat::ChatMessage message;
    message.role = role->get<std::string>();
    if (absl::Status s = CheckRole(param + ".role", &message.role); !s.ok()) return s;
    const json* content = Find(m, "content");
    if (content == nullptr) return FieldError(param + ".content", "is required");
    if (absl::Status s = ReadContent(*content, param + ".content", &message.content); !s.ok()) {
      return s;
    }
    total_bytes += message.content.size();
    if (total_bytes > limits.max_prompt_bytes) {
      return FieldError("messages", absl::StrCat("the message contents exceed the limit of ",
                                                 limits.max_prompt_bytes, " bytes"));
    }
    messages->push_back(std::move(message));
  }
  return absl::OkStatus();
}

}  // namespace

// The `scd` extension object (openai_api.h).
absl::Status ReadScdExtension(const json& body, ScdExtension* out) {
  const json* v = Find(body, "scd");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return FieldError("scd", "must be an object");
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (it.key() != "mode" && it.key() != "rung" && it.key() != "quality_floor" &&
        it.key() != "fanout") {
      return FieldError(absl::StrCat("scd.", it.key()),
                        "is not a field of scd (mode, rung, quality_floor, fanout)");
    }
  }
  if (const json* fanout = Find(*v, "fanout"); fanout != nullptr) {
    if (!fanout->is_array() || fanout->empty() || fanout->size() > kMaxFanout) {
      return FieldError("scd.fanout",
                        absl::StrCat("must be a list of 1 to ", kMaxFanout, " model names"));
    }
    for (const json& name : *fanout) {
      if (!name.is_string() || name.get<std::string>().empty()) {
        return FieldError("scd.fanout", "must hold model names (non-empty strings)");
      }
      const std::string n = name.get<std::string>();
      if (std::find(out->fanout.begin(), out->fanout.end(), n) != out->fanout.end()) {
        return FieldError("scd.fanout", absl::StrCat("names '", n, "' twice"));
      }
      out->fanout.push_back(n);
    }
  }
  if (const json* mode = Find(*v, "mode"); mode != nullptr) {
    if (!mode->is_string()) return FieldError("scd.mode", "must be a string");
    out->mode = mode->get<std::string>();
  }
  if (const json* rung = Find(*v, "rung"); rung != nullptr) {
    if (!rung->is_number_integer() || rung->get<int64_t>() < 0 || rung->get<int64_t>() > 255) {
      return FieldError("scd.rung", "must be an integer in [0, 255]");
    }
    out->rung = rung->get<int>();
  }
  if (const json* floor = Find(*v, "quality_floor"); floor != nullptr) {
    if (!floor->is_number() || !(floor->get<double>() >= 0 && floor->get<double>() <= 1)) {
      return FieldError("scd.quality_floor", "must be a number in [0, 1]");
    }
    out->quality_floor = floor->get<double>();
  }
  return absl::OkStatus();
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                         const RequestLimits& limits) {
  absl::StatusOr<json> parsed = ParseObject(body, limits);
  if (!parsed.ok()) return parsed.status();
  CompletionRequest request;
  if (absl::Status s = ReadModel(*parsed, limits, &request.model); !s.ok()) return s;
  if (absl::Status s = ReadPrompt(*parsed, limits, &request.prompt); !s.ok()) return s;
  if (absl::Status s = ReadCommon(*parsed, limits, "max_tokens", &request.sampling, &request.stream,
                                  &request.include_usage);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadScdExtension(*parsed, &request.scd); !s.ok()) return s;
  return request;
}

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body,
                                                                 const RequestLimits& limits) {
  absl::StatusOr<json> parsed = ParseObject(body, limits);
  if (!parsed.ok()) return parsed.status();
  ChatCompletionRequest request;
  if (absl::Status s = ReadModel(*parsed, limits, &request.model); !s.ok()) return s;
  if (absl::Status s = ReadMessages(*parsed, limits, &request.messages); !s.ok()) return s;
  // max_completion_tokens supersedes max_tokens; both at once must agree.
  const json* max_completion = Find(*parsed, "max_completion_tokens");
  const json* max_tokens = Find(*parsed, "max_tokens");
  if (max_completion != nullptr && max_tokens != nullptr && *max_completion != *max_tokens) {
    return FieldError("max_completion_tokens", "conflicts with max_tokens; give one of them");
  }
  const char* budget_key = max_completion != nullptr ? "max_completion_tokens" : "max_tokens";
  if (absl::Status s = ReadCommon(*parsed, limits, budget_key, &request.sampling, &request.stream,
                                  &request.include_usage);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadScdExtension(*parsed, &request.scd); !s.ok()) return s;
  return request;
}

absl::Status CheckJsonContentType(std::string_view content_type) {
  const absl::string_view header(content_type.data(), content_type.size());
  const absl::string_view media_type =
      absl::StripAsciiWhitespace(header.substr(0, header.find(';')));
  if (absl::EqualsIgnoreCase(media_type, "application/json")) return absl::OkStatus();
  constexpr size_t kShown = 100;  // of the header echoed back
  const std::string what =
      header.empty() ? "The request has no Content-Type"
                     : absl::StrCat("Unsupported Content-Type '", header.substr(0, kShown),
                                    header.size() > kShown ? "...'" : "'");
  absl::Status status = absl::InvalidArgumentError(
      absl::StrCat(what, ": the body must be JSON, sent with Content-Type: application/json"));
  return WithHttpStatus(WithErrorCode(status, "unsupported_media_type"), 415);
}

}  // namespace scd::http
