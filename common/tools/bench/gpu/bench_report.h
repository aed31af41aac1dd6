// scd-gpu-bench's report: results.md from the results (every table of every part that ran),
// and the summary lines scripts/gpu_check.sh greps into summary.txt, one figure a line, as
// "<model> <key>=<ratio> (<what it compares>)". Both read only the results JSON that
// gpu_bench_main.cc and the parts (kernel_bench.h, op_profile_bench.h, ...) build. CUDA-free.
#ifndef SCD_COMMON_TOOLS_BENCH_GPU_BENCH_REPORT_H_
#define SCD_COMMON_TOOLS_BENCH_GPU_BENCH_REPORT_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace scd::cuda_bench {

// A CompareLogits result ({relative_diff, same_greedy_token}) as the log and the summary say it.
std::string LogitsAgreement(const nlohmann::json& logits);

// The prefill length the summary and the profile report: 4096 tokens when measured, else the
// longest prompt; 0 when there is none.
int SummaryPrefillTokens(const std::vector<int>& prefill);

// results.md.
std::string ResultsMarkdown(const nlohmann::json& results);

// Prints the summary lines to stdout.
void PrintSummary(const nlohmann::json& results);

}  // namespace scd::cuda_bench

#endif  // SCD_COMMON_TOOLS_BENCH_GPU_BENCH_REPORT_H_
