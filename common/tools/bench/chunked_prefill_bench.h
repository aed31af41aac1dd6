// Chunked prefill (the decode engine's engine.prefill_chunk): what a long prompt's arrival costs
// the streams already running, and what chunking costs the long prompt itself, with every chunk
// size measured in the same run on the same model:
//   - `streams` requests run (short prompts, unbounded generation, greedy) until each has given
//     `warm_tokens` tokens; their median gap between tokens is the run's inter-token latency;
//   - then one request of `prompt_tokens` prompt tokens arrives; its time to first token is
//     measured, and the longest gap between two tokens of any running stream while it was
//     being prefilled (the stall it caused);
//   - the long request's first token must be the same at every chunk size (greedy; the model
//     and prompt are fixed), so chunking changed only the timing.
// The engine is the daemon's (DecodeEngine) on a CPU backend of a synthetic model, on the
// plain path or (sekv_budget > 0) the SEKV path, where the time to first token also holds
// the hierarchy's build on its own thread. With `payload` set, the long prompt arrives as a
// payload in that codec mode (its first prompt_tokens - payload_suffix tokens, encoded by the
// same model as producer) plus a suffix, and the swept chunk sizes are engine.rebuild_chunk's:
// what the payload's rebuild costs the running streams. Modes that need a calibration artifact
// (recompute, scd-reuse, scd) get one fitted on the spot from random-token passages (timing
// only: the codes' quality does not matter here). One untimed run comes first (a process's
// first prefills pay for its thread pools and buffers).
#ifndef SCD_COMMON_TOOLS_BENCH_CHUNKED_PREFILL_BENCH_H_
#define SCD_COMMON_TOOLS_BENCH_CHUNKED_PREFILL_BENCH_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/config.h"

namespace scd::bench {

struct ChunkedPrefillBenchOptions {
  std::string shape = "stories110M";  // BenchShapeConfig (runtime_bench.h)
  uint64_t seed = 1;                  // synthetic weights and token ids
  int streams = 4;
  int stream_prompt = 16;  // prompt tokens of each running stream
  int warm_tokens = 8;     // tokens each stream gives before the long prompt arrives
  int prompt_tokens = 960;
  // engine.prefill_chunk values (engine.rebuild_chunk's with a payload); 0 = whole prompts
  std::vector<int> chunks = {0, 256, 64};
  // > 0: every request takes the engine's SEKV path at this GPU budget (sekv.budget): the long
  // prompt is prefilled in chunks the same way, then its hierarchy is built off the loop.
  double sekv_budget = 0;
  std::string payload;      // a codec mode (wire_format.h) other than oracle; empty: no payload
  int payload_suffix = 16;  // the long request's suffix tokens after its payload
  std::function<void(const std::string&)> progress;  // one line per phase; may be empty
};

struct ChunkedPrefillRun {
  int chunk = 0;
  double itl_ms = 0;        // median gap between a running stream's tokens before the arrival
  double stall_ms = 0;      // longest such gap while the long prompt was prefilled
  double ttft_ms = 0;       // the long request: submission to first token
  long prefill_chunks = 0;  // the engine's prefills for the long prompt
  long rebuild_chunks = 0;  // and its payload's rebuilds
  // The long request's admission stages (DecodeTimings): its payload's rebuild (an oracle
  // payload's prefill), and the prefill of the rest, summed over their chunks.
  double rebuild_ms = 0, prefill_ms = 0;
  int32_t first_token = -1;
};

struct ChunkedPrefillBenchReport {
  ChunkedPrefillBenchOptions options;
  ModelConfig config;
  std::vector<ChunkedPrefillRun> runs;
  bool same_first_token = true;  // across the runs
};

absl::StatusOr<ChunkedPrefillBenchReport> RunChunkedPrefillBench(
    const ChunkedPrefillBenchOptions& options);

// Markdown: the command, the setup, one table row per chunk size with its stall and TTFT as
// ratios to the whole-prompt run's (when the run has chunk 0), and a last line
// `chunked_prefill_stall_vs_whole=<r> ttft_vs_whole=<r>` for the smallest chunk.
std::string FormatChunkedPrefillBenchReport(const ChunkedPrefillBenchReport& report,
                                            const std::string& command);

}  // namespace scd::bench

#endif  // SCD_COMMON_TOOLS_BENCH_CHUNKED_PREFILL_BENCH_H_
