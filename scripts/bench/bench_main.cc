// scd-bench: benchmark programs. `scd-bench runtime` measures the CPU runtime against the
// host's sgemm and memcpy ceilings (common/bench/runtime_bench.h) and ends with the line
// `prefill_vs_sgemm=<r> decode_vs_memcpy=<r>`. `scd-bench chunked-prefill` measures what a long
// prompt's arrival costs the running streams at each engine.prefill_chunk, or with --payload
// a long payload's at each engine.rebuild_chunk (common/bench/chunked_prefill_bench.h).
// `scd-bench rebuild` measures the codec's host rebuild whole against in blocks of rows
// (common/bench/rebuild_bench.h). `scd-bench small-batch` times a decode batch's few-row
// GEMMs three ways (common/bench/small_batch_bench.h). Progress goes to stderr, the report to
// stdout.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/bench/chunked_prefill_bench.h"
#include "common/bench/rebuild_bench.h"
#include "common/bench/runtime_bench.h"
#include "common/bench/small_batch_bench.h"
#include "common/cli/flags.h"

namespace {

constexpr char kUsage[] =
    "usage: scd-bench <benchmark> [flags]\n"
    "benchmarks:\n"
    "  runtime          CPU prefill GFLOP/s vs sgemm peak, decode GB/s vs memcpy bandwidth\n"
    "  chunked-prefill  running streams' stall and a long prompt's TTFT per prefill chunk\n"
    "                   (or, with --payload, per rebuild chunk)\n"
    "  rebuild          a payload's host rebuild whole vs in the codec's blocks of rows\n"
    "  small-batch      a decode batch's few-row GEMMs: GEMV per row, sgemm, SmallBatchLinear\n"
    "run `scd-bench <benchmark> --help` for its flags\n";

// Parses the comma-separated integers of `flag` (`text`) into *out; on a bad item, says so
// for `tool` and returns false. With skip_empty, "" is no items.
bool ParseIntList(const std::string& text, bool skip_empty, const char* tool, const char* flag,
                  std::vector<int>* out) {
  out->clear();
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    if (skip_empty && item.empty()) continue;
    int value = 0;
    if (!absl::SimpleAtoi(item, &value)) {
      std::cerr << tool << ": " << flag << " takes integers, not \"" << item << "\"\n";
      return false;
    }
    out->push_back(value);
  }
  return true;
}

// `argv` is the whole command line; argv[1] is "runtime".
int RunRuntime(int argc, const char* const* argv) {
  scd::bench::RuntimeBenchOptions options;
  std::string logits = "all";
  std::string json_path;
  int memcpy_mib = static_cast<int>(options.memcpy_bytes >> 20);
  scd::cli::FlagParser flags("scd-bench runtime", "[flags]");
  flags.AddString("shape", &options.shape, "synthetic model shape: stories110M or stories260K");
  flags.AddString("model", &options.model_dir, "benchmark this checkpoint directory instead");
  flags.AddInt("tokens", &options.prefill_tokens, "prefill length");
  flags.AddInt("reps", &options.prefill_reps, "timed prefill runs (best is reported)");
  flags.AddString("logits", &logits, "prefill logits for `all` rows or the `last` only");
  flags.AddInt("decode-context", &options.decode_context, "tokens prefilled before decoding");
  flags.AddInt("decode-steps", &options.decode_steps, "timed single-token decode steps");
  std::string decode_batches = "4,8,16";
  flags.AddString("decode-batches", &decode_batches,
                  "batch sizes of the batched decode after it, comma-separated (empty: none)");
  flags.AddInt("memcpy-mib", &memcpy_mib, "size of one memcpy in MiB");
  flags.AddUint64("seed", &options.seed, "seed of the synthetic weights and tokens");
  flags.AddString("json", &json_path, "also write the figures as JSON to this file");
  if (absl::Status s = flags.Parse(argc - 1, argv + 1); !s.ok()) {
    std::cerr << "scd-bench runtime: " << s.message() << " (see --help)\n";
    return scd::cli::kExitUsage;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (!flags.positional().empty()) {
    std::cerr << "scd-bench runtime: unexpected argument \"" << flags.positional()[0]
              << "\" (see --help)\n";
    return scd::cli::kExitUsage;
  }
  if (logits != "all" && logits != "last") {
    std::cerr << "scd-bench runtime: --logits must be all or last, not \"" << logits << "\"\n";
    return scd::cli::kExitUsage;
  }
  options.all_logits = logits == "all";
  if (memcpy_mib < 1) {
    std::cerr << "scd-bench runtime: --memcpy-mib must be >= 1\n";
    return scd::cli::kExitUsage;
  }
  options.memcpy_bytes = static_cast<size_t>(memcpy_mib) << 20;
  if (!ParseIntList(decode_batches, /*skip_empty=*/true, "scd-bench runtime", "--decode-batches",
                    &options.decode_batches)) {
    return scd::cli::kExitUsage;
  }
  options.progress = [](const std::string& line) { std::cerr << "[bench] " << line << std::endl; };

  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  absl::StatusOr<scd::bench::RuntimeBenchReport> report = scd::bench::RunRuntimeBench(options);
  if (!report.ok()) {
    std::cerr << "scd-bench runtime: " << report.status() << "\n";
    return report.status().code() == absl::StatusCode::kInvalidArgument ? scd::cli::kExitUsage
                                                                        : scd::cli::kExitFailure;
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << scd::bench::RuntimeBenchReportJson(*report, command);
    if (!out) {
      std::cerr << "scd-bench runtime: cannot write " << json_path << "\n";
      return scd::cli::kExitFailure;
    }
    std::cerr << "[bench] wrote " << json_path << std::endl;
  }
  std::cout << scd::bench::FormatRuntimeBenchReport(*report, command) << std::flush;
  return 0;
}

// `argv` is the whole command line; argv[1] is "chunked-prefill".
int RunChunkedPrefill(int argc, const char* const* argv) {
  scd::bench::ChunkedPrefillBenchOptions options;
  std::string chunks = "0,256,64";
  scd::cli::FlagParser flags("scd-bench chunked-prefill", "[flags]");
  flags.AddString("shape", &options.shape, "synthetic model shape: stories110M or stories260K");
  flags.AddInt("streams", &options.streams, "requests running when the long prompt arrives");
  flags.AddInt("stream-prompt", &options.stream_prompt, "prompt tokens of each running stream");
  flags.AddInt("warm-tokens", &options.warm_tokens, "tokens each stream gives first");
  flags.AddInt("prompt", &options.prompt_tokens, "prompt tokens of the long request");
  flags.AddString("chunks", &chunks,
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
  if (absl::Status s = flags.Parse(argc - 1, argv + 1); !s.ok()) {
    std::cerr << "scd-bench chunked-prefill: " << s.message() << " (see --help)\n";
    return scd::cli::kExitUsage;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  options.sekv_budget = sekv_budget;
  if (!ParseIntList(chunks, /*skip_empty=*/false, "scd-bench chunked-prefill", "--chunks",
                    &options.chunks)) {
    return scd::cli::kExitUsage;
  }
  options.progress = [](const std::string& line) { std::cerr << "[bench] " << line << std::endl; };
  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  absl::StatusOr<scd::bench::ChunkedPrefillBenchReport> report =
      scd::bench::RunChunkedPrefillBench(options);
  if (!report.ok()) {
    std::cerr << "scd-bench chunked-prefill: " << report.status() << "\n";
    return report.status().code() == absl::StatusCode::kInvalidArgument ? scd::cli::kExitUsage
                                                                        : scd::cli::kExitFailure;
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
  flags.AddString("shape", &options.shape, "synthetic model shape: stories110M or stories260K");
  flags.AddInt("rows", &options.rows, "payload tokens");
  flags.AddString("modes", &modes, "codec modes, comma-separated");
  flags.AddString("blocks", &blocks,
                  "CodecOptions::cpu_block_rows values, comma-separated: whole, 0 (the codec's "
                  "default) or rows");
  flags.AddInt("reps", &options.reps, "timed rebuilds per mode and block (the median is reported)");
  flags.AddUint64("seed", &options.seed, "seed of the synthetic weights and tokens");
  if (absl::Status s = flags.Parse(argc - 1, argv + 1); !s.ok()) {
    std::cerr << "scd-bench rebuild: " << s.message() << " (see --help)\n";
    return scd::cli::kExitUsage;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  options.modes = absl::StrSplit(modes, ',');
  options.blocks.clear();
  for (absl::string_view b : absl::StrSplit(blocks, ',')) {
    int value = 0;
    if (b == "whole") {
      value = scd::bench::kWholeBlock;
    } else if (!absl::SimpleAtoi(b, &value) || value < 0) {
      std::cerr << "scd-bench rebuild: --blocks takes whole or integers >= 0, not \"" << b
                << "\"\n";
      return scd::cli::kExitUsage;
    }
    options.blocks.push_back(value);
  }
  options.progress = [](const std::string& line) { std::cerr << "[bench] " << line << std::endl; };
  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  absl::StatusOr<scd::bench::RebuildBenchReport> report = scd::bench::RunRebuildBench(options);
  if (!report.ok()) {
    std::cerr << "scd-bench rebuild: " << report.status() << "\n";
    return report.status().code() == absl::StatusCode::kInvalidArgument ? scd::cli::kExitUsage
                                                                        : scd::cli::kExitFailure;
  }
  std::cout << scd::bench::FormatRebuildBenchReport(*report, command) << std::flush;
  return 0;
}

// `argv` is the whole command line; argv[1] is "small-batch".
int RunSmallBatch(int argc, const char* const* argv) {
  scd::bench::SmallBatchBenchOptions options;
  std::string rows = "1,2,4,8,16,32,64";
  scd::cli::FlagParser flags("scd-bench small-batch", "[flags]");
  flags.AddString("rows", &rows, "batch rows, comma-separated (1 to 64)");
  flags.AddInt("reps", &options.reps, "timed runs of each way (the best is reported)");
  if (absl::Status s = flags.Parse(argc - 1, argv + 1); !s.ok()) {
    std::cerr << "scd-bench small-batch: " << s.message() << " (see --help)\n";
    return scd::cli::kExitUsage;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (!ParseIntList(rows, /*skip_empty=*/false, "scd-bench small-batch", "--rows", &options.rows)) {
    return scd::cli::kExitUsage;
  }
  options.progress = [](const std::string& line) { std::cerr << "[bench] " << line << std::endl; };
  const std::string command = scd::cli::QuotedCommandLine(argc, argv);
  absl::StatusOr<scd::bench::SmallBatchBenchReport> report =
      scd::bench::RunSmallBatchBench(options);
  if (!report.ok()) {
    std::cerr << "scd-bench small-batch: " << report.status() << "\n";
    return report.status().code() == absl::StatusCode::kInvalidArgument ? scd::cli::kExitUsage
                                                                        : scd::cli::kExitFailure;
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
  if (benchmark == "chunked-prefill") return RunChunkedPrefill(argc, argv);
  if (benchmark == "rebuild") return RunRebuild(argc, argv);
  if (benchmark == "small-batch") return RunSmallBatch(argc, argv);
  std::cerr << "scd-bench: unknown benchmark \"" << benchmark << "\"\n\n" << kUsage;
  return scd::cli::kExitUsage;
}
