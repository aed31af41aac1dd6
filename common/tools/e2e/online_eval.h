// scd-eval --online: the shadow oracle's statistics on one workload, measured two ways.
// Online: a prefill daemon and a decode daemon with quality.shadow_rate 1 serve every prompt
// (greedy, `tokens` generated, the codes' mode pinned, no prefix cache), and the decode daemon's
// /metrics is read once every sample is in (scd_shadow_*: the sums over the samples of their
// KL, agreement and per-layer K/V error). Offline: the same prompts, payloads and generated
// tokens through the same comparison in this process (CompareWithOwnCache, the statistics
// scd-eval computes), so that the figures an operator watches and the offline tool's agree on
// one workload. The report holds both, and their largest difference.
#ifndef SCD_COMMON_TOOLS_E2E_ONLINE_EVAL_H_
#define SCD_COMMON_TOOLS_E2E_ONLINE_EVAL_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::e2e {

struct OnlineEvalOptions {
  std::string base_model, specialist_model, artifact;  // checkpoint dirs, .scd.safetensors
  std::string bin_dir = "build/bin";                   // scd-prefill and scd-decode
  std::string workdir;                                 // configs and logs
  std::string mode = "scd";                            // the codes' mode (not oracle)
  int rung = 0;                                        // scd: the rate ladder's rung
  // The prompts: bAbI questions (the story so far, then the question), or the first
  // `prompt_tokens` tokens of each text passage (passages end at blank lines; in a file
  // without any, as WikiText's raw files, each line is one); at most `max_prompts`.
  std::string babi_files, text_file;
  int max_prompts = 100;
  int prompt_tokens = 128;
  int tokens = 16;  // generated per prompt, all teacher-forced (quality.shadow_tokens)
};

// Means over the samples of each statistic (ShadowStats).
struct ShadowMeans {
  int samples = 0;
  double first_kl = 0, first_top1 = 0, kl = 0, top1 = 0;
  std::vector<double> k_rel_error, v_rel_error;  // per layer

  nlohmann::json ToJson() const;
};

struct OnlineEvalReport {
  ShadowMeans online, offline;
  double max_abs_difference = 0;  // over every mean above
  int dropped = 0;                // samples the decode daemon dropped (should be 0)

  nlohmann::json ToJson() const;
  std::string Markdown() const;
};

using OnlineProgressFn = std::function<void(const std::string&)>;

absl::StatusOr<OnlineEvalReport> RunOnlineEval(const OnlineEvalOptions& options,
                                               const OnlineProgressFn& progress);

}  // namespace scd::e2e

#endif  // SCD_COMMON_TOOLS_E2E_ONLINE_EVAL_H_
