// Prompt files, synthetic prompts and request bodies (see workload.h).
#include "common/tools/loadgen/workload.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/random.h"

namespace scd::loadgen {
namespace {

using nlohmann::json;

std::string_view StripCr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// Splits into lines, keeping 1-based line numbers.
std::vector<std::pair<int, std::string_view>> Lines(std::string_view contents) {
  std::vector<std::pair<int, std::string_view>> lines;
  int number = 0;
  while (!contents.empty()) {
    ++number;
    const size_t end = contents.find('\n');
    lines.emplace_back(number, StripCr(contents.substr(0, end)));
    if (end == std::string_view::npos) break;
    contents.remove_prefix(end + 1);
  }
  return lines;
}

absl::Status LineError(const std::string& name, int line, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(name, ":", line, ": ", message));
}

absl::StatusOr<std::string> NonEmptyString(const json& value, const std::string& what) {
  if (!value.is_string())
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a string"));
  std::string text = value.get<std::string>();
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  return text;
}

absl::StatusOr<std::vector<ChatTurn>> ParseMessages(const json& value) {
  if (!value.is_array() || value.empty()) {
    return absl::InvalidArgumentError("\"messages\" must be a non-empty array");
  }
  std::vector<ChatTurn> turns;
  for (size_t i = 0; i < value.size(); ++i) {
    const json& m = value[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
        !m["content"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " must be {\"role\": string, \"content\": string}"));
    }
    turns.push_back(ChatTurn{m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return turns;
}

// One JSONL object -> one prompt, or several for a shared-prefix group.
absl::Status ParseObject(const json& object, int group, std::vector<Prompt>& out) {
  if (!object.is_object()) return absl::InvalidArgumentError("expected a JSON object");
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    if (key != "prompt" && key != "messages" && key != "context" && key != "questions" &&
        key != "max_tokens" && key != "id") {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown key \"", key,
          "\" (expected prompt, messages, or context + questions; optional max_tokens, id)"));
    }
  }
  const int kinds = static_cast<int>(object.contains("prompt")) +
                    static_cast<int>(object.contains("messages")) +
                    static_cast<int>(object.contains("context") || object.contains("questions"));
  if (kinds != 1) {
    return absl::InvalidArgumentError(
        "needs exactly one of \"prompt\", \"messages\", or \"context\" with \"questions\"");
  }
  Prompt base;
  if (object.contains("max_tokens")) {
    const json& v = object["max_tokens"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 30)) {
      return absl::InvalidArgumentError("\"max_tokens\" must be a positive integer");
    }
    base.max_tokens = v.get<int>();
  }
  if (object.contains("id")) {
    const json& v = object["id"];
    if (!v.is_string() && !v.is_number_integer()) {
      return absl::InvalidArgumentError("\"id\" must be a string or an integer");
    }
    base.id = v.is_string() ? v.get<std::string>() : v.dump();
  }
  if (object.contains("prompt")) {
    absl::StatusOr<std::string> text = NonEmptyString(object["prompt"], "\"prompt\"");
    if (!text.ok()) return text.status();
    base.text = std::move(*text);
    out.push_back(std::move(base));
    return absl::OkStatus();
  }
  if (object.contains("messages")) {
    absl::StatusOr<std::vector<ChatTurn>> turns = ParseMessages(object["messages"]);
    if (!turns.ok()) return turns.status();
    base.messages = std::move(*turns);
    out.push_back(std::move(base));
    return absl::OkStatus();
  }
  if (!object.contains("context") || !object.contains("questions")) {
    return absl::InvalidArgumentError("\"context\" and \"questions\" go together");
  }
  absl::StatusOr<std::string> context = NonEmptyString(object["context"], "\"context\"");
  if (!context.ok()) return context.status();
  const json& questions = object["questions"];
  if (!questions.is_array() || questions.empty()) {
    return absl::InvalidArgumentError("\"questions\" must be a non-empty array of strings");
  }
  for (size_t i = 0; i < questions.size(); ++i) {
    absl::StatusOr<std::string> q =
        NonEmptyString(questions[i], absl::StrCat("\"questions\"[", i, "]"));
    if (!q.ok()) return q.status();
    Prompt p = base;
    p.text = absl::StrCat(*context, "\n\n", *q);
    p.group = group;
    out.push_back(std::move(p));
  }
  return absl::OkStatus();
}

// Short, common words: each is one token in GPT-2/LLaMA-style vocabularies (with its space).
constexpr const char* kWords[] = {
    "the",     "of",     "and",    "to",     "in",      "is",      "was",     "it",    "for",
    "on",      "with",   "as",     "he",     "she",     "they",    "we",      "at",    "by",
    "this",    "from",   "that",   "have",   "not",     "but",     "had",     "his",   "her",
    "are",     "were",   "one",    "all",    "can",     "there",   "been",    "if",    "more",
    "when",    "will",   "would",  "who",    "so",      "no",      "out",     "up",    "into",
    "time",    "only",   "new",    "some",   "could",   "these",   "two",     "may",   "first",
    "then",    "do",     "any",    "like",   "my",      "now",     "over",    "such",  "our",
    "man",     "me",     "even",   "most",   "made",    "after",   "also",    "did",   "many",
    "off",     "before", "must",   "well",   "back",    "through", "years",   "much",  "where",
    "your",    "way",    "down",   "should", "because", "each",    "just",    "those", "people",
    "how",     "too",    "little", "state",  "good",    "very",    "make",    "world", "still",
    "own",     "see",    "men",    "work",   "long",    "here",    "get",     "both",  "between",
    "life",    "being",  "under",  "never",  "day",     "same",    "another", "know",  "while",
    "last",    "might",  "us",     "great",  "old",     "year",    "look",    "come",  "since",
    "against", "go",     "came",   "right",  "used",    "take",    "three",   "small", "house",
    "water",   "story",  "light",  "river",  "city"};
constexpr int kNumWords = static_cast<int>(sizeof(kWords) / sizeof(kWords[0]));

}  // namespace

const char* ApiPath(Api api) {
  return api == Api::kChat ? "/v1/chat/completions" : "/v1/completions";
}

absl::StatusOr<std::vector<Prompt>> ParsePrompts(std::string_view contents,
                                                 const std::string& name) {
  const std::vector<std::pair<int, std::string_view>> lines = Lines(contents);
  bool jsonl = false;
  for (const auto& [number, line] : lines) {
    if (IsBlank(line)) continue;
    const size_t first = line.find_first_not_of(" \t");
    jsonl = line[first] == '{';
    break;
  }
  std::vector<Prompt> prompts;
  int group = 0;
  for (const auto& [number, line] : lines) {
    if (IsBlank(line)) continue;
    if (!jsonl) {
      Prompt p;
      p.text = std::string(line);
      prompts.push_back(std::move(p));
      continue;
    }
    json object;
    try {
      object = json::parse(line);
    } catch (const json::parse_error& e) {
      return LineError(name, number, absl::StrCat("not valid JSON (", e.what(), ")"));
    }
    if (absl::Status s = ParseObject(object, group, prompts); !s.ok()) {
      return LineError(name, number, std::string(s.message()));
    }
    ++group;
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no prompts"));
  }
  return prompts;
}

absl::StatusOr<std::vector<Prompt>> LoadPromptFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) return contents.status();
  return ParsePrompts(*contents, path);
}

absl::StatusOr<std::vector<Prompt>> SyntheticPrompts(int count, int words, uint64_t seed) {
  if (count < 1) return absl::InvalidArgumentError("synthetic prompt count must be >= 1");
  if (words < 1) return absl::InvalidArgumentError("synthetic prompt length must be >= 1 word");
  std::vector<Prompt> prompts(count);
  SplitMix64 rng(seed ^ 0x6c6f616467656eULL);  // "loadgen"
  for (int i = 0; i < count; ++i) {
    std::string& text = prompts[i].text;
    text = absl::StrCat("Request ", i, ":");
    for (int w = 2; w < words; ++w) {  // the "Request N:" opening counts as about two words
      absl::StrAppend(&text, " ", kWords[rng.NextBelow(kNumWords)]);
    }
  }
  return prompts;
}

absl::Status CheckPromptsForApi(const std::vector<Prompt>& prompts, Api api) {
  if (api == Api::kChat) return absl::OkStatus();
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (!prompts[i].messages.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt ", i, " is a chat conversation (\"messages\"); send it with --chat"));
    }
  }
  return absl::OkStatus();
}

std::string RequestBody(const Prompt& prompt, const BodyOptions& options) {
  json body = {{"model", options.model},
               {"max_tokens", prompt.max_tokens > 0 ? prompt.max_tokens : options.max_tokens},
               {"stream_options", {{"include_usage", true}}}};
  if (options.api == Api::kCompletions) {
    body["prompt"] = prompt.text;
  } else if (prompt.messages.empty()) {
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt.text}}});
  } else {
    json messages = json::array();
    for (const ChatTurn& turn : prompt.messages) {
      messages.push_back({{"role", turn.role}, {"content", turn.content}});
    }
    body["messages"] = std::move(messages);
  }
  if (options.extra_body.is_object()) body.update(options.extra_body);
  body["stream"] = true;
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace scd::loadgen
