// Offline SEKV evaluation (scd-eval --sekv-budget): SEKV and its two baselines against the full
// KV cache, all at the same GPU budget and in the same run, through one decode loop
// (SekvDecoder over a KvCache):
//   - text: packed `context`-token samples of a corpus. The prompt's first
//     context − scored_tokens tokens come from the consumer's own prefill (K/V and surprisal:
//     oracle mode); the remaining tokens are decoded teacher-forced, and each decode step's
//     next-token distribution is compared with the full cache's (the consumer's prefill of the
//     whole sample): perplexity, KL(full ‖ method), top-1 agreement;
//   - bAbI: through the full SCD path when an SCD artifact is given (the producer prefills,
//     the scd codec encodes, serialises, parses and rebuilds the consumer's pre-RoPE K/V, the
//     payload's surprisal segments it), else oracle; the consumer decodes the last prompt
//     token and answers greedily. f1_full is the same path with the full cache;
//   - needle in a haystack: a single bAbI fact about one person ("Mary went to the kitchen.")
//     placed at several depths in a context-filling haystack of facts about the others, then
//     "Q: Where is Mary? A:"; accuracy per depth.
// The GPU ratio of each cache is measured from its data structures after the first decode
// step (so the heavy-hitter selection has happened), as bytes summed over all samples.
#ifndef SCD_COMMON_SEKV_SEKV_EVALUATION_H_
#define SCD_COMMON_SEKV_SEKV_EVALUATION_H_

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"
#include "common/scd/artifact.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/span_store.h"
#include "common/sekv/zoom_router.h"
#include "common/tokenizer/tokenizer.h"

namespace scd::sekv {

struct SekvEvalConfig {
  double budget = kDefaultBudget;  // GPU-tier bytes as a fraction of the full KV cache
  std::string text_file;
  int text_samples = 40;
  int context = 512;
  int scored_tokens = 128;
  std::string babi_files;
  int max_examples = 300;
  int max_examples_per_file = 0;
  int max_answer_tokens = 8;
  std::vector<double> niah_depths = {0.1, 0.3, 0.5, 0.7, 0.9};
  int niah_trials = 20;  // per depth; 0 = skip
  SekvOptions sekv;
  BudgetShares shares;
  // Also run the ablations: "sekv-nozoom" (summaries only), "sekv-span" (whole-span zoom-in,
  // no pins: SeKV as published) and "sekv-nopin" (token zoom-in, no pins).
  bool ablate = false;
};

struct MethodReport {
  std::string name;        // "full", "sekv", "h2o", "chunk", or an ablation (see ablate)
  MemoryBreakdown memory;  // summed over samples, after the first decode step
  double text_nll = 0, text_kl = 0, text_top1 = 0;
  long text_rows = 0;
  double f1 = 0, em = 0;
  int babi_examples = 0;
  std::map<std::string, std::pair<double, int>> f1_by_file;
  std::vector<double> niah_accuracy;     // per depth
  double expanded_tokens_per_step = 0;   // per (layer, KV head) routing round
  double candidate_tokens_per_step = 0;  // tokens scored in the CPU tier per round
  double fetch_hit_rate = 0, fetch_wait_ms = 0;

  double ppl() const;
};

struct SekvEvalReport {
  double budget = 0;
  std::string kv_source_babi;  // "scd" or "oracle"
  std::vector<double> niah_depths;
  std::vector<MethodReport> methods;               // full first
  nlohmann::json plan = nlohmann::json::object();  // mean plan figures

  const MethodReport* Find(const std::string& name) const;
  // {"sekv": {...}, "h2o": {...}, "chunk": {...}} (+ the ablations), each with budget,
  // gpu_bytes_ratio, ppl_full, ppl_<name>, f1_full, f1_<name>, top1_agreement and details.
  nlohmann::json ToJson() const;
};

class SekvEvaluator {
 public:
  // `scd_artifact` may be null (bAbI then runs in oracle mode); `router` may be null (the
  // default share-threshold router).
  static absl::StatusOr<std::unique_ptr<SekvEvaluator>> Create(
      Backend& producer, Backend& consumer, std::shared_ptr<const ScdArtifact> scd_artifact,
      const Tokenizer& tokenizer, std::shared_ptr<const ZoomRouter> router);

  absl::StatusOr<SekvEvalReport> Run(
      const SekvEvalConfig& config,
      const std::function<void(const std::string&)>& progress = nullptr);

 private:
  SekvEvaluator(Backend& p, Backend& c, std::shared_ptr<const ScdArtifact> a, const Tokenizer& t,
                std::shared_ptr<const ZoomRouter> r)
      : producer_(p), consumer_(c), scd_(std::move(a)), tokenizer_(t), router_(std::move(r)) {}
  Backend& producer_;
  Backend& consumer_;
  std::shared_ptr<const ScdArtifact> scd_;
  const Tokenizer& tokenizer_;
  std::shared_ptr<const ZoomRouter> router_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SEKV_EVALUATION_H_
