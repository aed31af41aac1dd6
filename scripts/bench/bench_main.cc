// scd-bench: benchmark programs. `scd-bench runtime` measures the CPU runtime against the
// host's sgemm and memcpy ceilings, int8 against F32 weights, and cold starts in new processes
// (common/tools/bench/runtime_bench.h), and ends with the line of its ratios. `scd-bench
// cold-start` is one such process (common/tools/bench/cold_start_bench.h). `scd-bench
// chunked-prefill` measures what a long prompt's arrival costs the running streams at each
// engine.prefill_chunk, or with --payload a long payload's at each engine.rebuild_chunk
// (common/tools/bench/chunked_prefill_bench.h). `scd-bench rebuild` measures the codec's host
// rebuild whole against in blocks of rows (common/tools/bench/rebuild_bench.h). `scd-bench
// small-batch` times a decode batch's few-row GEMMs three ways
// (common/tools/bench/small_batch_bench.h). Progress goes to stderr, the report to stdout.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/tools/bench/chunked_prefill_bench.h"
#include "common/tools/bench/cold_start_bench.h"
#include "common/tools/bench/rebuild_bench.h"
#include "common/tools/bench/runtime_bench.h"
#include "common/tools/bench/small_batch_bench.h"
#include "common/tools/cli/flags.h"

namespace {

constexpr char kUsage[] =
    "usage: scd-bench <benchmark> [flags]\n"
    "benchmarks:\n"
    "  runtime          CPU prefill GFLOP/s vs sgemm peak, decode GB/s vs memcpy bandwidth\n"
    "  chunked-prefill  running streams' stall and a long prompt's TTFT per prefill chunk\n"
    "                   (or, with --payload, per rebuild chunk)\n"
    "  rebuild          a payload's host rebuild whole vs in the codec's blocks of rows\n"
    "  small-batch      a decode batch's few-row GEMMs: GEMV per row, sgemm, SmallBatchLinear\n"
    "  cold-start       one new process: load a checkpoint, first token, decode; peak RSS\n"
    "run `scd-bench <benchmark> --help` for its flags\n";

// This program's path, for the runtime benchmark's cold-start children; "" when unknown.
std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// A benchmark's error: its options' (InvalidArgument) as a usage error, any other as a failure.
int BenchError(const scd::cli::FlagParser& flags, const absl::Status& status) {
  return status.code() == absl::StatusCode::kInvalidArgument ? flags.UsageError(status)
                                                             : flags.Fail(status);
}

// `argv` is the whole command line; argv[1] is "runtime".
int RunRuntime(int argc, const char* const* argv) {
  scd::bench::RuntimeBenchOptions options;
  std::string logits = "all";
  std::string json_path;
  int memcpy_mib = static_cast<int>(options.memcpy_bytes >> 20);
  scd::cli::FlagParser flags("scd-bench runtime", "[flags]");
  flags.AddString("shape", &options.shape,
                  "synthetic model shape: stories110M, synthetic110m-v512 or stories260K");
  flags.AddString("model", &options.model_dir, "benchmark this checkpoint directory instead");
  flags.AddInt("tokens", &options.prefill_tokens, "prefill length");
  flags.AddInt("reps", &options.prefill_reps, "timed prefill runs (best is reported)");
  flags.AddString("logits", &logits, "prefill logits for `all` rows or the `last` only");
  flags.AddInt("decode-context", &options.decode_context, "tokens prefilled before decoding");
  flags.AddInt("decode-steps", &options.decode_steps, "timed single-token decode steps");
  flags.AddIntList("decode-batches", &options.decode_batches,
                   "batch sizes of the batched decode after it, comma-separated (empty: none)");
  flags.AddInt("memcpy-mib", &memcpy_mib, "size of one memcpy in MiB");
  flags.AddUint64("seed", &options.seed, "seed of the synthetic weights and tokens");
  flags.AddInt("int8-rounds", &options.int8_rounds,
               "rounds of F32 and int8 decode steps, alternating (0: no int8)");
  flags.AddInt("cold-starts", &options.cold_start_rounds,
               "rounds of one F32 and one int8 cold start, each a new process (0: none)");
  flags.AddInt("cold-start-tokens", &options.cold_start_tokens,
               "greedy tokens each cold start decodes");
  flags.AddString("checkpoint-dir", &options.checkpoint_dir,
                  "where a synthetic model is saved for the cold starts (default: a temporary "
                  "directory, removed afterwards)");
  flags.AddString("json", &json_path, "also write the figures as JSON to this file");
  if (std::optional<int> exit = flags.ParseOrExit(argc - 1, argv + 1)) return *exit;
  options.exe = SelfPath();
  if (logits != "all" && logits != "last") {
    return flags.UsageError(absl::StrCat("--logits must be all or last, not \"", logits, "\""));
  }
  options.all_logits = logits == "all";
  if (memcpy_mib < 1) return flags.UsageError("--memcpy-mib must be >= 1");
  options.memcpy_bytes = static_cast<size_t>(memcpy_mib) << 20;
  options.progress = [](const std::string& line) { std::cerr << "[bench] " << line << std::endl; };

  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  absl::StatusOr<scd::bench::RuntimeBenchReport> report = scd::bench::RunRuntimeBench(options);
  if (!report.ok()) {
    return BenchError(flags, report.status());
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << scd::bench::RuntimeBenchReportJson(*report, command);
    if (!out) {
      return flags.Fail(absl::StrCat("cannot write ", json_path));
    }
    std::cerr << "[bench] wrote " << json_path << std::endl;
  }
  std::cout << scd::bench::FormatRuntimeBenchReport(*report, command) << std::flush;
  return 0;
}

// `argv` is the whole command line; argv[1] is "cold-start".
int RunColdStartCommand(int argc, const char* const* argv) {
  scd::bench::ColdStartOptions options;
  std::string dtype = "f32";
  bool json = false;
  scd::cli::FlagParser flags("scd-bench cold-start", "--model DIR [flags]");
  flags.AddString("model", &options.model_dir, "checkpoint directory", /*required=*/true);
  flags.AddString("weights-dtype", &dtype, "f32 or int8");
  flags.AddInt("prompt-tokens", &options.prompt_tokens, "random prompt length");
  flags.AddInt("decode-tokens", &options.decode_tokens, "greedy tokens after the first");
  flags.AddUint64("seed", &options.seed, "seed of the prompt");
  flags.AddBool("json", &json, "print the report as one JSON line");
  if (std::optional<int> exit = flags.ParseOrExit(argc - 1, argv + 1)) return *exit;
  absl::StatusOr<scd::WeightDtype> parsed = scd::ParseWeightDtype(dtype);
  if (!parsed.ok()) return flags.UsageError(parsed.status());
  options.dtype = *parsed;
  absl::StatusOr<scd::bench::ColdStartReport> r = scd::bench::RunColdStart(options);
  if (!r.ok()) return BenchError(flags, r.status());
  if (json) {
    std::cout << scd::bench::ColdStartJson(*r) << std::endl;
    return 0;
  }
  std::cout << absl::StrFormat(
      "cold start (%s): load %.1f ms, TTFT %.1f ms, decode %.1f tokens/s, RSS %.1f MB at "
      "start, %.1f MB peak, weights %.1f MB\n",
      dtype, r->load_seconds * 1e3, r->ttft_seconds * 1e3, r->decode_tokens_per_s,
      r->start_rss_bytes / 1e6, r->peak_rss_bytes / 1e6, r->weight_bytes / 1e6);
  return 0;
}

// `argv` is the whole command line; argv[1] is "chunked-prefill".
int RunChunkedPrefill(int argc, const char* const* argv) {
  scd::bench::ChunkedPrefillBenchOptions options;
  scd::cli::FlagParser flags("scd-bench chunked-prefill", "[flags]");
  flags.AddString("shape", &options.shape,
                  "synthetic model shape: stories110M, synthetic110m-v512 or stories260K");
  flags.AddInt("streams", &options.streams, "requests running when the long prompt arrives");
  flags.AddInt("stream-prompt", &options.stream_prompt, "prompt tokens of each running stream");
  flags.AddInt("warm-tokens", &options.warm_tokens, "tokens each stream gives first");
  flags.AddInt("prompt", &options.prompt_tokens, "prompt tokens of the long request");
  flags.AddIntList("chunks", &options.chunks,
                   "engine.prefill_chunk values, comma-separated (0: whole); with --payload, "
                   "engine.rebuild_chunk values");
  flags.AddUint64("seed", &options.seed, "seed of the synthetic weights and tokens");
  float sekv_budget = 0;
  flags.AddFloat("sekv-budget", &sekv_budget,
                 "> 0: the engine's SEKV path at this GPU budget (0: the plain path)");
  flags.AddString("payload", &options.payload,
                  "the long prompt as a payload in this codec mode (raw, quant8, quant4, "
                  "recompute, scd-reuse, scd) plus a suffix; empty: no payload");
  flags.AddInt("payload-suffix", &options.payload_suffix,
               "with --payload: the long prompt's suffix tokens after the payload");
  if (std::optional<int> exit = flags.ParseOrExit(argc - 1, argv + 1)) return *exit;
  options.sekv_budget = sekv_budget;
  options.progress = [](const std::string& line) { std::cerr << "[bench] " << line << std::endl; };
  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  absl::StatusOr<scd::bench::ChunkedPrefillBenchReport> report =
      scd::bench::RunChunkedPrefillBench(options);
  if (!report.ok()) {
    return BenchError(flags, report.status());
  }
  std::cout << scd::bench::FormatChunkedPrefillBenchReport(*report, command) << std::flush;
  return report->same_first_token ? 0 : scd::cli::kExitFailure;
}

// `argv` is the whole command line; argv[1] is "rebuild".
int RunRebuild(int argc, const char* const* argv) {
  scd::bench::RebuildBenchOptions options;
  std::string modes = "raw,quant8,quant4,recompute,scd-reuse,scd";
  std::string blocks = "whole,0";
  scd::cli::FlagParser flags("scd-bench rebuild", "[flags]");
  flags.AddString("shape", &options.shape,
                  "synthetic model shape: stories110M, synthetic110m-v512 or stories260K");
  flags.AddInt("rows", &options.rows, "payload tokens");
  flags.AddString("modes", &modes, "codec modes, comma-separated");
  flags.AddString("blocks", &blocks,
                  "CodecOptions::cpu_block_rows values, comma-separated: whole, 0 (the codec's "
                  "default) or rows");
  flags.AddInt("reps", &options.reps, "timed rebuilds per mode and block (the median is reported)");
  flags.AddUint64("seed", &options.seed, "seed of the synthetic weights and tokens");
  if (std::optional<int> exit = flags.ParseOrExit(argc - 1, argv + 1)) return *exit;
  options.modes = absl::StrSplit(modes, ',');
  options.blocks.clear();
  for (absl::string_view b : absl::StrSplit(blocks, ',')) {
    int value = 0;
    if (b == "whole") {
      value = scd::bench::kWholeBlock;
    } else if (!absl::SimpleAtoi(b, &value) || value < 0) {
      return flags.UsageError(
          absl::StrCat("--blocks takes whole or integers >= 0, not \"", b, "\""));
    }
    options.blocks.push_back(value);
  }
  options.progress = [](const std::string& line) { std::cerr << "[bench] " << line << std::endl; };
  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  absl::StatusOr<scd::bench::RebuildBenchReport> report = scd::bench::RunRebuildBench(options);
  if (!report.ok()) {
    return BenchError(flags, report.status());
  }
  std::cout << scd::bench::FormatRebuildBenchReport(*report, command) << std::flush;
  return 0;
}

// `argv` is the whole command line; argv[1] is "small-batch".
int RunSmallBatch(int argc, const char* const* argv) {
  scd::bench::SmallBatchBenchOptions options;
  scd::cli::FlagParser flags("scd-bench small-batch", "[flags]");
  flags.AddIntList("rows", &options.rows, "batch rows, comma-separated (1 to 64)");
  flags.AddInt("reps", &options.reps, "timed runs of each way (the best is reported)");
  if (std::optional<int> exit = flags.ParseOrExit(argc - 1, argv + 1)) return *exit;
  options.progress = [](const std::string& line) { std::cerr << "[bench] " << line << std::endl; };
  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  absl::StatusOr<scd::bench::SmallBatchBenchReport> report =
      scd::bench::RunSmallBatchBench(options);
  if (!report.ok()) {
    return BenchError(flags, report.status());
  }
  std::cout << scd::bench::FormatSmallBatchBenchReport(*report, command) << std::flush;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    (argc < 2 ? std::cerr : std::cout) << kUsage;
    return argc < 2 ? scd::cli::kExitUsage : 0;
  }
  std::string benchmark = argv[1];
  if (benchmark == "runtime") return RunRuntime(argc, argv);
  if (benchmark == "cold-start") return RunColdStartCommand(argc, argv);
  if (benchmark == "chunked-prefill") return RunChunkedPrefill(argc, argv);
  if (benchmark == "rebuild") return RunRebuild(argc, argv);
  if (benchmark == "small-batch") return RunSmallBatch(argc, argv);
  std::cerr << "scd-bench: unknown benchmark \"" << benchmark << "\"\n\n" << kUsage;
  return scd::cli::kExitUsage;
}
