// scd-generate: generates a continuation of a prompt with any supported checkpoint.
// The continuation streams to stdout as tokens are chosen (flushed per token); timings go to
// stderr. Exit codes: 0 success, 2 bad command line, 1 anything that fails after parsing
// (model or tokenizer cannot be loaded, backend unavailable, generation error).
//
// The stream decoder is primed with the prompt ids (their text is discarded) so that the
// printed continuation is exactly Decode(prompt + generated) minus Decode(prompt): the
// decoder's strip-the-leading-space rule applies to the prompt, not to the continuation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/runtime/generate.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tools/cli/flags.h"

namespace {

constexpr char kProgram[] = "scd-generate";

std::string_view FinishName(scd::FinishReason reason) {
  switch (reason) {
    case scd::FinishReason::kLength:
      return "length";
    case scd::FinishReason::kStop:
      return "stop";
    case scd::FinishReason::kContextFull:
      return "context full";
    case scd::FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The model, its tokenizer and a backend for it, and how long loading them took.
struct Loaded {
  std::shared_ptr<const scd::Model> model;
  std::unique_ptr<scd::Tokenizer> tokenizer;
  std::unique_ptr<scd::Backend> backend;
  double load_ms = 0;
};

// Loads the checkpoint in `model_dir`, its tokenizer and a `kind` backend; an error's message
// is the text to report.
absl::StatusOr<Loaded> LoadAll(const std::string& model_dir, scd::BackendKind kind,
                               const scd::BackendOptions& options) {
  Loaded l;
  auto load_start = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<const scd::Model>> model = scd::LoadModel(model_dir);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrFormat("cannot load model: %s", model.status().ToString()));
  }
  l.model = *std::move(model);
  const std::string tokenizer_path = model_dir + "/tokenizer.json";
  absl::StatusOr<std::unique_ptr<scd::Tokenizer>> tokenizer =
      scd::Tokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(), absl::StrFormat("cannot load tokenizer: %s",
                                                                   tokenizer.status().ToString()));
  }
  l.tokenizer = *std::move(tokenizer);
  absl::StatusOr<std::unique_ptr<scd::Backend>> backend =
      scd::CreateBackend(kind, l.model, options);
  if (!backend.ok()) return absl::Status(backend.status().code(), backend.status().ToString());
  l.backend = *std::move(backend);
  l.load_ms = MillisecondsSince(load_start);
  return l;
}

// Encodes the prompt and checks that it is non-empty and fits the model's context.
absl::StatusOr<std::vector<int32_t>> EncodePrompt(const Loaded& l, const std::string& prompt) {
  std::vector<int32_t> prompt_ids = l.tokenizer->Encode(prompt);
  if (prompt_ids.empty()) return absl::InvalidArgumentError("the prompt encodes to no tokens");
  const int context = l.model->config.max_position_embeddings;
  if (static_cast<int>(prompt_ids.size()) > context) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the prompt is %d tokens; the model's context holds %d", prompt_ids.size(), context));
  }
  return prompt_ids;
}

// Generates the continuation, printing its text to stdout as each token is chosen.
absl::StatusOr<scd::GenerateResult> GenerateStreaming(const Loaded& l,
                                                      const std::vector<int32_t>& prompt_ids,
                                                      int max_tokens,
                                                      const scd::SamplingParams& sampling) {
  scd::StreamDecoder stream(*l.tokenizer);
  for (int32_t id : prompt_ids) stream.Push(id);  // prime: see the file comment
  scd::GenerateOptions options;
  options.max_new_tokens = max_tokens;
  options.sampling = sampling;
  bool streamed = false;
  options.on_token = [&stream, &streamed](int32_t id) {
    streamed = true;
    const std::string text = stream.Push(id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  absl::StatusOr<scd::GenerateResult> result = scd::Generate(*l.backend, prompt_ids, options);
  const std::string tail = stream.Flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  if (streamed) std::fputc('\n', stdout);
  std::fflush(stdout);
  return result;
}

// The timing summary printed to stderr after the continuation.
std::string TimingStats(const Loaded& l, int prompt_tokens, const scd::GenerateResult& result) {
  // The first sampled token comes from the prefill's logits and every later one from one
  // decode step; a sampled stop id is not returned, so on kStop every returned token was
  // decoded, otherwise the last one was not.
  const int generated = static_cast<int>(result.tokens.size());
  const int decode_tokens =
      result.finish == scd::FinishReason::kStop ? generated : std::max(0, generated - 1);
  std::string stats;
  absl::StrAppendFormat(&stats, "--- %s: %s on %s, loaded in %.0f ms\n", kProgram,
                        l.model->config.name, l.backend->name(), l.load_ms);
  absl::StrAppendFormat(&stats, "prompt tokens:    %d\n", prompt_tokens);
  absl::StrAppendFormat(&stats, "generated tokens: %d (finish: %s)\n", generated,
                        FinishName(result.finish));
  absl::StrAppendFormat(&stats, "prefill:          %.2f ms, %.1f tok/s\n",
                        result.prefill_seconds * 1e3,
                        result.prefill_seconds > 0 ? prompt_tokens / result.prefill_seconds : 0);
  if (decode_tokens > 0 && result.decode_seconds > 0) {
    absl::StrAppendFormat(&stats, "decode:           %.1f tok/s (%d steps, %.2f ms/token)\n",
                          decode_tokens / result.decode_seconds, decode_tokens,
                          result.decode_seconds * 1e3 / decode_tokens);
  } else {
    absl::StrAppendFormat(&stats, "decode:           no decode steps\n");
  }
  return stats;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, prompt, backend_name = "cpu", weights_dtype = "f32";
  int max_tokens = 64;
  scd::SamplingParams sampling;  // greedy unless --temperature > 0
  scd::cli::FlagParser flags(kProgram, "--model DIR --prompt TEXT [flags]");
  flags.AddString("model", &model_dir, "Hugging Face checkpoint directory", /*required=*/true);
  flags.AddString("prompt", &prompt, "text to continue", /*required=*/true);
  flags.AddInt("max-tokens", &max_tokens, "most tokens to generate");
  flags.AddFloat("temperature", &sampling.temperature, "0 = greedy");
  flags.AddFloat("top-p", &sampling.top_p, "nucleus sampling threshold in (0, 1]");
  flags.AddInt("top-k", &sampling.top_k, "sample from the k most likely tokens (0 = all)");
  flags.AddUint64("seed", &sampling.seed, "sampling seed");
  flags.AddString("backend", &backend_name, "cpu or cuda");
  flags.AddString("weights-dtype", &weights_dtype, "f32 or int8 (the CPU backend's matrices)");

  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (max_tokens < 1) return flags.UsageError("--max-tokens must be >= 1");
  if (absl::Status s = sampling.Validate(); !s.ok()) return flags.UsageError(s);
  absl::StatusOr<scd::BackendKind> kind = scd::ParseBackendKind(backend_name);
  if (!kind.ok()) return flags.UsageError(kind.status());

  absl::StatusOr<scd::WeightDtype> dtype = scd::ParseWeightDtype(weights_dtype);
  if (!dtype.ok()) return flags.UsageError(dtype.status());
  scd::BackendOptions options;
  options.weights_dtype = *dtype;
  absl::StatusOr<Loaded> loaded = LoadAll(model_dir, *kind, options);
  if (!loaded.ok()) return flags.Fail(loaded.status());
  absl::StatusOr<std::vector<int32_t>> prompt_ids = EncodePrompt(*loaded, prompt);
  if (!prompt_ids.ok()) return flags.Fail(prompt_ids.status());
  absl::StatusOr<scd::GenerateResult> result =
      GenerateStreaming(*loaded, *prompt_ids, max_tokens, sampling);
  if (!result.ok())
    return flags.Fail(absl::StrFormat("generation failed: %s", result.status().ToString()));
  std::cerr << TimingStats(*loaded, static_cast<int>(prompt_ids->size()), *result);
  return 0;
}
