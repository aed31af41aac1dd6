// Cold start: what a new process pays before and while it serves one request, measured the way
// a user runs a model: load a checkpoint, create the CPU backend, prefill a short prompt, take
// the first token, then decode greedily. Reported per run:
//   load_seconds          LoadModel + CreateBackend (int8 conversion included)
//   ttft_seconds          load + prefill + the first token
//   decode_tokens_per_s   the greedy steps after the first token
//   start_rss_bytes       the process's VmRSS before the load: its code and shared libraries
//                         (with a CUDA build, the CUDA libraries' relocated pages among them)
//   peak_rss_bytes        the process's VmHWM at the end (mapped checkpoint pages included)
//   weight_bytes          the weights as the backend holds them (CpuBackendWeightBytes)
// `scd-bench cold-start` runs one in its own process; RunColdStartChildren runs several, each in
// a fresh process (this program again), so that no run inherits another's memory or caches
// beyond the operating system's page cache (the checkpoint file is read from it when warm).
#ifndef SCD_COMMON_TOOLS_BENCH_COLD_START_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_COLD_START_BENCH_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"

namespace scd::bench {

struct ColdStartOptions {
  std::string model_dir;
  WeightDtype dtype = WeightDtype::kF32;
  int prompt_tokens = 8;    // random ids (seeded), no tokenizer involved
  int decode_tokens = 256;  // greedy tokens after the first
  uint64_t seed = 1;
};

struct ColdStartReport {
  WeightDtype dtype = WeightDtype::kF32;
  double load_seconds = 0;
  double ttft_seconds = 0;
  double decode_tokens_per_s = 0;
  int decode_tokens = 0;
  size_t start_rss_bytes = 0;
  size_t peak_rss_bytes = 0;
  size_t weight_bytes = 0;
  std::vector<int32_t> tokens;  // the greedy continuation, first token included
};

// One cold start in this process.
absl::StatusOr<ColdStartReport> RunColdStart(const ColdStartOptions& options);

// The report as one JSON line, and back.
std::string ColdStartJson(const ColdStartReport& report);
absl::StatusOr<ColdStartReport> ParseColdStartJson(const std::string& line);

// Runs `exe cold-start --json ...` once per entry of `dtypes`, in that order, each in a new
// process, and parses each child's last output line. `progress` may be empty.
absl::StatusOr<std::vector<ColdStartReport>> RunColdStartChildren(
    const std::string& exe, const ColdStartOptions& options, const std::vector<WeightDtype>& dtypes,
    const std::function<void(const std::string&)>& progress);

}  // namespace scd::bench

#endif  // SCD_COMMON_TOOLS_BENCH_COLD_START_BENCH_H_
