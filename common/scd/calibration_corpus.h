// Calibration corpus: turns the text files given to scd-calibrate into token sequences that
// both models prefill. A file in bAbI format (numbered lines) contributes one passage per
// story, written exactly as the specialist reads it (statements, then each question with its
// answer); any other file contributes its blank-line-separated passages. Passages from the
// files are interleaved, truncated to max_tokens, shuffled with a seed and capped in total.
#ifndef SCD_COMMON_SCD_CALIBRATION_CORPUS_H_
#define SCD_COMMON_SCD_CALIBRATION_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"

namespace scd {

struct CorpusLoadOptions {
  int max_tokens_per_passage = 256;
  long max_total_tokens = 150000;
  int min_tokens = 16;
  uint64_t seed = 1;
};

// `sources`, when given, receives the index into `files` that each passage came from.
absl::StatusOr<std::vector<std::vector<int32_t>>> LoadCalibrationPassages(
    const std::vector<std::string>& files, const Tokenizer& tokenizer,
    const CorpusLoadOptions& options, std::vector<int>* sources = nullptr);

// Splits passages into training and held-back (selection) sets: the last `holdout` passages
// whose source is in `select_sources` (all sources when empty) are held back.
void SplitHeldOut(std::vector<std::vector<int32_t>> passages, const std::vector<int>& sources,
                  const std::vector<int>& select_sources, int holdout,
                  std::vector<std::vector<int32_t>>* train,
                  std::vector<std::vector<int32_t>>* held);

// The same for several consumers (shared_calibration.h): consumer c holds back the last
// `holdout` passages from select_sources[c] (all sources when empty) that no consumer before
// it holds; every passage held by none trains, so that all consumers train on one set.
void SplitHeldOutPerConsumer(std::vector<std::vector<int32_t>> passages,
                             const std::vector<int>& sources,
                             const std::vector<std::vector<int>>& select_sources, int holdout,
                             std::vector<std::vector<int32_t>>* train,
                             std::vector<std::vector<std::vector<int32_t>>>* held);

}  // namespace scd

#endif  // SCD_COMMON_SCD_CALIBRATION_CORPUS_H_
