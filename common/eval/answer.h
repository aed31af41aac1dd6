// Answer extraction from a greedy continuation. bAbI answers are trained as `A: <answer>.`,
// so the answer is the generated text up to the first '.', newline or end of sequence,
// trimmed. AnswerCollector does the same on a token stream and tells the generation loop to
// stop as soon as the answer is complete, so evaluation does not decode past it.
#ifndef SCD_COMMON_EVAL_ANSWER_H_
#define SCD_COMMON_EVAL_ANSWER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"
#include "common/tokenizer/tokenizer.h"

namespace scd::eval {

// The text before the first '.', '\n' or '\r', with surrounding whitespace removed.
std::string ExtractAnswer(std::string_view continuation);

// Whether `text` already contains the end of an answer ('.', '\n' or '\r').
bool AnswerComplete(std::string_view text);

// Collects generated tokens until the answer is complete. Use it as GenerateOptions::on_token:
//   options.on_token = [&](int32_t id) { return collector.Push(id); };
class AnswerCollector {
 public:
  explicit AnswerCollector(const Tokenizer& tokenizer);

  // Adds a generated token. Returns false once the answer is complete: its text holds a '.'
  // or a newline, or `id` is the tokenizer's EOS.
  bool Push(int32_t id);

  bool done() const { return done_; }
  const std::string& text() const { return text_; }  // decoded continuation so far
  std::string answer() const { return ExtractAnswer(text_); }

 private:
  StreamDecoder decoder_;
  int32_t eos_id_;
  std::string text_;
  bool done_ = false;
};

struct GreedyAnswer {
  std::string answer;
  std::string continuation;  // the decoded generated text
  int generated_tokens = 0;
};

// Greedily continues `prompt_ids` (already tokenized, BOS included) on `backend` for at most
// `max_new_tokens`, stopping at the end of the answer. The oracle path of the evaluation.
absl::StatusOr<GreedyAnswer> GenerateGreedyAnswer(Backend& backend, const Tokenizer& tokenizer,
                                                  absl::Span<const int32_t> prompt_ids,
                                                  int max_new_tokens = 8);

}  // namespace scd::eval

#endif  // SCD_COMMON_EVAL_ANSWER_H_
