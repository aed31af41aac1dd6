// Fitting bAbI prompts into a model's context window. Late questions of long stories (task 2's
// dev file reaches ~1000 tokens at the stories260K tokenizer) do not fit a 512-position model,
// so the evaluation must either skip them or drop the story's oldest items (statements and
// answered questions) until the prompt fits; both are reported, never silent.
//
// A truncated prompt is no longer a prefix of its story's transcript (BabiStoryView); callers
// that share one prefill across a story's questions must treat it separately.
#ifndef SCD_COMMON_EVAL_BABI_CONTEXT_H_
#define SCD_COMMON_EVAL_BABI_CONTEXT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/eval/babi.h"
#include "common/tokenizer/tokenizer.h"

namespace scd::eval {

enum class OverlongPromptPolicy {
  kSkip,        // leave the example out
  kDropOldest,  // drop the oldest story items until the prompt fits
};

struct BabiContextOptions {
  // Budget for the prompt's ids, BOS included: the context length minus the tokens the
  // answer may generate (e.g. 512 - 8).
  int max_prompt_tokens = 504;
  OverlongPromptPolicy policy = OverlongPromptPolicy::kDropOldest;
};

struct BabiContextReport {
  int kept = 0;       // examples that fit unchanged
  int truncated = 0;  // examples shortened by kDropOldest
  int skipped = 0;    // examples left out (kSkip, or the question alone does not fit)
};

// Returns the examples whose prompts fit `options.max_prompt_tokens` under `tokenizer`
// (with BOS), truncating or skipping the others per the policy. `stories` must be the list
// the examples were made from (looked up by story_id). NotFound when an example's story is
// missing.
absl::StatusOr<std::vector<BabiExample>> FitBabiExamplesToContext(
    const std::vector<BabiStory>& stories, std::vector<BabiExample> examples,
    const Tokenizer& tokenizer, const BabiContextOptions& options,
    const BabiPromptFormat& format = {}, BabiContextReport* report = nullptr);

}  // namespace scd::eval

#endif  // SCD_COMMON_EVAL_BABI_CONTEXT_H_
