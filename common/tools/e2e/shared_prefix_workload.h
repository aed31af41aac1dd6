// The shared-prefix workload of the end-to-end benchmark: long shared contexts, each
// followed by several different short questions — the SCD serving case, where one base model
// prefills a common context once and specialists answer many questions about it.
//
// Built from bAbI task 1 (single supporting fact) so that answers can be scored: a context is
// one story's statements preceded by the statements of other stories until it reaches about
// `context_tokens` tokens (a story longer than that is cut to its longest beginning that fits
// and names enough people; one that cannot come within 25% of it is skipped), and its questions ask
// where each person of the final story is. The answer is that person's last location in the context
// (task 1's statements all read
// "<person> <verb> to the <place>."), and because the final story comes last, it is also the
// answer with the filler in front. Prompts use the specialist's training format:
// "<statements> Q: Where is <person>? A:".
#ifndef SCD_COMMON_TOOLS_E2E_SHARED_PREFIX_WORKLOAD_H_
#define SCD_COMMON_TOOLS_E2E_SHARED_PREFIX_WORKLOAD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"

namespace scd::e2e {

struct SharedPrefixQuestion {
  std::string prompt;  // context + " Q: Where is X? A:"
  std::string answer;
};

struct SharedPrefixContext {
  std::string context;
  int context_tokens = 0;
  std::vector<SharedPrefixQuestion> questions;
};

struct SharedPrefixOptions {
  int contexts = 16;
  int questions_per_context = 3;
  int context_tokens = 400;
};

// From a bAbI task-1 file. InvalidArgument when the file has too few usable stories.
absl::StatusOr<std::vector<SharedPrefixContext>> BuildBabiSharedPrefixWorkload(
    const std::string& babi_path, const Tokenizer& tokenizer, const SharedPrefixOptions& options);

// The same, tokenized with the tokenizer.json of the checkpoint directory `model_dir`.
absl::StatusOr<std::vector<SharedPrefixContext>> LoadBabiSharedPrefixWorkload(
    const std::string& babi_path, const std::string& model_dir, const SharedPrefixOptions& options);

}  // namespace scd::e2e

#endif  // SCD_COMMON_TOOLS_E2E_SHARED_PREFIX_WORKLOAD_H_
