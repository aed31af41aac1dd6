// The host rebuild of a payload (ConsumerCodec::Rebuild on a CPU backend) whole against in
// blocks of rows (CodecOptions::cpu_block_rows), every mode and block size measured in the
// same run on the same model and payload:
//   - one payload of `rows` tokens per mode, encoded by a synthetic model of `shape` as its own
//     producer (modes that need a calibration artifact get one fitted on the spot from
//     random-token passages: timing only);
//   - per mode, one untimed round, then `reps` timed rounds of a rebuild at every block size
//     in turn (interleaved, so that the machine's noise falls on every size alike), each into
//     a fresh sequence (allocated before the clock starts), on a thread of its own as the
//     decode engine's loop rebuilds; the median and fastest time, and the process's minor page
//     faults during each rebuild (their median);
//   - the F32 K/V buffers one block takes (every layer's keys and values for its rows): the
//     rebuild's host memory beyond the payload and the cache.
// Blocks are the codec's own, inside one Rebuild call (no decode steps between them, unlike
// the engine's rebuild chunks: chunked_prefill_bench.h).
#ifndef SCD_COMMON_TOOLS_BENCH_REBUILD_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_REBUILD_BENCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/config.h"

namespace scd::bench {

inline constexpr int kWholeBlock = -1;  // a block size: the whole payload in one piece

struct RebuildBenchOptions {
  std::string shape = "stories110M";  // BenchShapeConfig (runtime_bench.h)
  uint64_t seed = 1;                  // synthetic weights and token ids
  int rows = 1024;                    // payload tokens
  std::vector<std::string> modes = {"raw", "quant8", "quant4", "recompute", "scd-reuse", "scd"};
  // CodecOptions::cpu_block_rows values: kWholeBlock, 0 (the codec's default size) or rows.
  std::vector<int> blocks = {kWholeBlock, 0};
  int reps = 5;
  std::function<void(const std::string&)> progress;  // one line per phase; may be empty
};

struct RebuildBenchRun {
  std::string mode;
  int block = 0;          // as requested (kWholeBlock, 0, or rows)
  size_t block_rows = 0;  // as the codec cut the payload (ConsumerCodec::HostBlockRows)
  size_t blocks = 0;      // pieces of the payload
  double ms = 0;          // median rebuild time
  double min_ms = 0;      // the fastest rebuild
  double faults = 0;      // median minor page faults per rebuild
  double buffer_mib = 0;  // one block's F32 K/V, every layer
};

struct RebuildBenchReport {
  RebuildBenchOptions options;
  ModelConfig config;
  std::vector<RebuildBenchRun> runs;  // mode by mode, each in the order of `blocks`
};

absl::StatusOr<RebuildBenchReport> RunRebuildBench(const RebuildBenchOptions& options);

// Markdown: the command, the setup, one table row per mode and block size with its time as a
// ratio to the same mode's whole rebuild (when the run has kWholeBlock), and a last line
// `host_rebuild_vs_whole <mode>=<r> ...` for each mode's first block size that is not whole.
std::string FormatRebuildBenchReport(const RebuildBenchReport& report, const std::string& command);

}  // namespace scd::bench

#endif  // SCD_COMMON_TOOLS_BENCH_REBUILD_BENCH_H_
