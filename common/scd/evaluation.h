// Offline evaluation of every codec mode through one pipeline, in one run (scd-eval): for each
// bAbI question the producer prefills the prompt once, each mode
// encodes, serialises, parses and rebuilds the consumer's cache, the consumer prefills the
// last prompt token itself and answers greedily. Reported per mode:
//   - quality: exact match and token F1 on bAbI; perplexity, next-token KL and top-1 agreement
//     against the oracle on a text file (codes cover the first half of each passage, the
//     consumer scores the second half);
//   - cost: payload bytes per token (whole serialised payload, header included) and its ratio
//     to raw F16, producer encode time, consumer rebuild time and the consumer's own prefill
//     time for the same tokens, measured side by side, plus both times at a fixed long prompt
//     (timing_tokens) where prefill cost matters.
#ifndef SCD_COMMON_SCD_EVALUATION_H_
#define SCD_COMMON_SCD_EVALUATION_H_

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/eval/babi_context.h"
#include "common/runtime/backend.h"
#include "common/scd/artifact.h"
#include "common/scd/calibration.h"
#include "common/scd/codec.h"
#include "common/tokenizer/tokenizer.h"

namespace scd {

struct EvalConfig {
  std::vector<CodecMode> modes;
  std::string babi_files;         // comma-separated; empty = skip
  int max_examples = 300;         // across files (0 = all)
  int max_examples_per_file = 0;  // 0 = no cap
  std::string text_file;          // perplexity text; empty = skip
  int text_passages = 100;
  int text_max_tokens = 512;
  int timing_tokens = 256;  // 0 = skip the long-prompt timing
  int timing_reps = 5;
  int max_answer_tokens = 8;
  CodecOptions codec;
};

struct ModeReport {
  CodecMode mode = CodecMode::kOracle;
  std::string label;  // mode name, or an ablation label
  int examples = 0;
  int truncated_examples = 0;  // bAbI prompts whose oldest sentences were dropped to fit
  double em = 0, f1 = 0;
  std::map<std::string, std::pair<double, int>> f1_by_file;  // file → (F1, examples)
  double payload_bytes_per_token = 0, payload_ratio_vs_raw = 0;
  double encode_ms = 0, rebuild_ms = 0, consumer_prefill_ms = 0;  // means per bAbI example
  int text_tokens = 0;
  double ppl = 0, kl = 0, top1 = 0;                 // text protocol, against the oracle
  double long_rebuild_ms = 0, long_prefill_ms = 0;  // at timing_tokens

  nlohmann::json ToJson() const;
};

class Evaluator {
 public:
  // `artifact` may be null when only oracle/raw/quant modes are evaluated.
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(
      Backend& producer, Backend& consumer, std::shared_ptr<const ScdArtifact> artifact,
      const Tokenizer& tokenizer);

  // Runs `config.modes`; `label_suffix` tags ablation rows. Progress goes to `progress`.
  absl::StatusOr<std::vector<ModeReport>> Run(const EvalConfig& config,
                                              const ProgressFn& progress = nullptr);

 private:
  Evaluator(Backend& p, Backend& c, std::shared_ptr<const ScdArtifact> a, const Tokenizer& t)
      : producer_(p), consumer_(c), artifact_(std::move(a)), tokenizer_(t) {}
  Backend& producer_;
  Backend& consumer_;
  std::shared_ptr<const ScdArtifact> artifact_;
  const Tokenizer& tokenizer_;
  eval::BabiContextReport babi_fit_;
};

// Writes `<prefix>.md`, `<prefix>.csv` and `<prefix>.png` (quality against payload, with the
// Pareto front of F1 against payload ratio) for a set of reports.
absl::Status WriteEvalTables(const std::vector<ModeReport>& reports, const std::string& prefix,
                             const std::string& title);

}  // namespace scd

#endif  // SCD_COMMON_SCD_EVALUATION_H_
