// Answer extraction (see answer.h). The collector decodes with StreamDecoder so that a
// multi-byte character split across tokens never produces a spurious stop.
#include "common/eval/answer.h"

#include "common/base/status_macros.h"
#include "common/runtime/generate.h"

namespace scd::eval {
namespace {

constexpr std::string_view kAnswerEnd = ".\n\r";

std::string_view Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\n\r\f\v");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\n\r\f\v") - begin + 1);
}

}  // namespace

std::string ExtractAnswer(std::string_view continuation) {
  const size_t end = continuation.find_first_of(kAnswerEnd);
  return std::string(Trim(continuation.substr(0, end)));
}

bool AnswerComplete(std::string_view text) {
  return text.find_first_of(kAnswerEnd) != std::string_view::npos;
}

AnswerCollector::AnswerCollector(const Tokenizer& tokenizer)
    : decoder_(tokenizer), eos_id_(tokenizer.eos_id()) {}

bool AnswerCollector::Push(int32_t id) {
  if (done_) return false;
  if (id == eos_id_ && eos_id_ >= 0) {
    text_ += decoder_.Flush();
    done_ = true;
    return false;
  }
  text_ += decoder_.Push(id);
  done_ = AnswerComplete(text_);
  return !done_;
}

absl::StatusOr<GreedyAnswer> GenerateGreedyAnswer(Backend& backend, const Tokenizer& tokenizer,
                                                  absl::Span<const int32_t> prompt_ids,
                                                  int max_new_tokens) {
  AnswerCollector collector(tokenizer);
  GenerateOptions options;
  options.max_new_tokens = max_new_tokens;
  options.on_token = [&collector](int32_t id) { return collector.Push(id); };
  SCD_ASSIGN_OR_RETURN(GenerateResult result, Generate(backend, prompt_ids, options));
  GreedyAnswer out;
  out.continuation = collector.text();
  if (!collector.done()) {
    // Stopped by length or EOS (the stop id is not passed to on_token): flush the tail.
    out.continuation = tokenizer.Decode(result.tokens);
  }
  out.answer = ExtractAnswer(out.continuation);
  out.generated_tokens = static_cast<int>(result.tokens.size());
  return out;
}

}  // namespace scd::eval
