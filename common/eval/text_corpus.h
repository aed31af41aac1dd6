// Plain-text evaluation corpora and the half-split perplexity protocol.
//
// Two file layouts:
//   - kBlankLineSeparated (TinyStories files in ../shared/data): a passage is a run of
//     non-blank lines, ended by a blank line; its lines are joined with '\n'.
//   - kLines (WikiText raw): each non-blank line is a passage; section headings
//     (" = Title = ", " = = Section = = ") can be skipped.
//
// Half split: a passage's token ids t[0..n) (BOS first) are cut at h = n / 2. The producer's
// codes cover the first half t[0..h); the consumer scores the second half, i.e. the NLL of
// every t[i] for h <= i < n given t[0..i). A consumer whose KV cache holds positions [0, h-1)
// therefore prefills t[h-1..n) with all logits: logits row j predicts t[h + j].
#ifndef SCD_COMMON_EVAL_TEXT_CORPUS_H_
#define SCD_COMMON_EVAL_TEXT_CORPUS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/tokenizer.h"

namespace scd::eval {

enum class CorpusFormat { kBlankLineSeparated, kLines };

struct CorpusOptions {
  CorpusFormat format = CorpusFormat::kBlankLineSeparated;
  int max_passages = 0;       // 0 = all
  size_t min_chars = 1;       // shorter passages (after trimming) are skipped
  bool skip_headings = true;  // kLines: drop WikiText "= ... =" heading lines
};

// Passages of `text`, trimmed of surrounding whitespace, in file order.
std::vector<std::string> SplitPassages(std::string_view text, const CorpusOptions& options = {});

// Reads a comma-separated list of files and concatenates their passages (max_passages
// applies to the total). NotFound names a missing file.
absl::StatusOr<std::vector<std::string>> ReadPassages(std::string_view comma_separated_paths,
                                                      const CorpusOptions& options = {});

struct SplitOptions {
  int max_tokens = 512;  // truncate a passage's ids (BOS included) to this many
  int min_tokens = 8;    // skip passages with fewer ids than this (after truncation)
  int max_passages = 0;  // 0 = all
};

// One passage's ids, cut in two halves.
struct PassageSplit {
  int passage_index = 0;        // index into the passage list
  std::vector<int32_t> tokens;  // the (truncated) ids, BOS first
  int prefix_length = 0;        // h = tokens.size() / 2

  absl::Span<const int32_t> prefix() const {
    return absl::MakeConstSpan(tokens).subspan(0, prefix_length);
  }
  absl::Span<const int32_t> continuation() const {
    return absl::MakeConstSpan(tokens).subspan(prefix_length);
  }
  int num_scored() const { return static_cast<int>(tokens.size()) - prefix_length; }
};

// Cuts `tokens` (truncated to max_tokens) at half. InvalidArgument when fewer than 2 remain.
absl::StatusOr<PassageSplit> SplitInHalves(absl::Span<const int32_t> tokens, int max_tokens);

// Tokenizes each passage (with the post-processor, so BOS first) and splits it; passages
// shorter than min_tokens are skipped.
absl::StatusOr<std::vector<PassageSplit>> MakePassageSplits(
    const Tokenizer& tokenizer, const std::vector<std::string>& passages,
    const SplitOptions& options = {});

}  // namespace scd::eval

#endif  // SCD_COMMON_EVAL_TEXT_CORPUS_H_
