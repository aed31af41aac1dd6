// Workload: the prompts scd-loadgen sends and the OpenAI request bodies built from them.
//
// Prompt files come in two formats, told apart by the first non-blank line:
//   - JSON Lines (that line starts with '{'): one JSON object per non-blank line, each one of
//       {"prompt": "..."}                                    a completion-style prompt
//       {"messages": [{"role": "user", "content": "..."}]}   a chat conversation
//       {"context": "...", "questions": ["...", ...]}       a shared-prefix group
//     with an optional positive "max_tokens" (overrides --max-tokens for that prompt) and an
//     optional "id" (string or number, kept for the records). A shared-prefix group expands to
//     one prompt per question, context + "\n\n" + question, sent one after another: the
//     long-shared-context / several-short-questions workload of the end-to-end evidence,
//     where a server that reuses the context's KV cache should show a lower TTFT on every
//     question after the first. Unknown keys are errors (a misspelt "max_token" must not be
//     silently ignored); every error names the file and line.
//   - plain text: every non-blank line is one prompt, taken literally.
// A "prompt" is sent to /v1/chat/completions as a single user message; "messages" cannot be
// sent to /v1/completions (CheckPromptsForApi says so before any request goes out).
//
// Synthetic prompts (--synthetic-prompt-tokens N) are N words each, drawn from a fixed list
// of short common English words (about one token each in GPT-style BPE vocabularies) by a
// seeded SplitMix64, and start with a unique index so that no two share a long prefix.
#ifndef SCD_COMMON_TOOLS_LOADGEN_WORKLOAD_H_
#define SCD_COMMON_TOOLS_LOADGEN_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::loadgen {

enum class Api { kChat, kCompletions };

// "/v1/chat/completions" or "/v1/completions".
const char* ApiPath(Api api);

struct ChatTurn {
  std::string role;
  std::string content;
};

struct Prompt {
  std::string text;                // the prompt (when messages is empty)
  std::vector<ChatTurn> messages;  // a chat conversation (when non-empty)
  int max_tokens = 0;              // 0: the run's --max-tokens
  int group = -1;                  // shared-prefix group (its line's index), -1 for none
  std::string id;                  // the file's "id", if any
};

// Parses prompt-file contents; `name` (the path) prefixes error messages as "name:LINE: ...".
// InvalidArgument for malformed lines or an empty workload.
absl::StatusOr<std::vector<Prompt>> ParsePrompts(std::string_view contents,
                                                 const std::string& name);
// Reads and parses a prompt file.
absl::StatusOr<std::vector<Prompt>> LoadPromptFile(const std::string& path);

// `count` prompts of `words` words each (both >= 1), deterministic in `seed`.
absl::StatusOr<std::vector<Prompt>> SyntheticPrompts(int count, int words, uint64_t seed);

// InvalidArgument naming the first prompt that `api` cannot carry.
absl::Status CheckPromptsForApi(const std::vector<Prompt>& prompts, Api api);

struct BodyOptions {
  Api api = Api::kChat;
  std::string model;
  int max_tokens = 128;                                  // when the prompt names none
  nlohmann::json extra_body = nlohmann::json::object();  // merged in (e.g. temperature)
};

// The streaming request body: {"model", "messages" | "prompt", "max_tokens", "stream": true,
// "stream_options": {"include_usage": true}} plus extra_body's fields (which may override
// anything but "stream").
std::string RequestBody(const Prompt& prompt, const BodyOptions& options);

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_WORKLOAD_H_
