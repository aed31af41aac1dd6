// See rebuild_bench.h.
#include "common/tools/bench/rebuild_bench.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/base/elapsed.h"
#include "common/base/huge_pages.h"
#include "common/base/status_macros.h"
#include "common/runtime/backend.h"
#include "common/scd/codec.h"
#include "common/tools/bench/bench_payload.h"
#include "common/tools/bench/runtime_bench.h"

namespace scd::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::string BlockName(int block) {
  return block == kWholeBlock ? "whole" : block == 0 ? "default" : absl::StrFormat("%d", block);
}

// One mode at every block size, interleaved: rep by rep, a rebuild at each block size, so
// that the machine's noise falls on all of them alike; the first round is untimed.
absl::StatusOr<std::vector<RebuildBenchRun>> RunMode(
    const RebuildBenchOptions& o, const std::shared_ptr<const Model>& model,
    const std::shared_ptr<const ScdArtifact>& artifact, const Payload& payload) {
  const ModelConfig& c = model->config;
  const size_t rows = payload.token_ids.size();
  const size_t n = o.blocks.size();
  std::vector<std::unique_ptr<ConsumerCodec>> codecs;
  std::vector<RebuildBenchRun> runs(n);
  for (size_t i = 0; i < n; ++i) {
    CodecOptions co;
    co.cpu_block_rows = o.blocks[i] == kWholeBlock ? static_cast<int>(rows) : o.blocks[i];
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<ConsumerCodec> codec,
                         ConsumerCodec::Create(model, model->digest(), artifact, co));
    RebuildBenchRun& r = runs[i];
    r.mode = std::string(CodecModeName(payload.mode));
    r.block = o.blocks[i];
    r.block_rows = codec->HostBlockRows(payload);
    r.blocks = (rows + r.block_rows - 1) / r.block_rows;
    r.buffer_mib = static_cast<double>(r.block_rows) * 2 * c.num_layers * c.kv_dim() *
                   sizeof(float) / (1 << 20);
    codecs.push_back(std::move(codec));
  }
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateBackend(BackendKind::kCpu, model));
  std::vector<std::vector<double>> ms(n), faults(n);
  // On a thread of its own, as the decode engine's loop rebuilds (its allocations come from
  // that thread's malloc arena, not the main thread's).
  absl::Status status;
  std::thread loop([&] {
    status = [&]() -> absl::Status {
      for (int rep = 0; rep <= o.reps; ++rep) {
        for (size_t i = 0; i < n; ++i) {
          SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq,
                               backend->NewSequence(static_cast<int>(rows)));
          const long f0 = MinorPageFaults();
          const auto t0 = Clock::now();
          SCD_RETURN_IF_ERROR(codecs[i]->Rebuild(payload, *backend, *seq));
          const double elapsed = MsSince(t0);
          const long f1 = MinorPageFaults();
          if (seq->length() != static_cast<int>(rows)) {
            return absl::InternalError("rebuild bench: the rebuild left the sequence short");
          }
          if (rep == 0) continue;  // untimed: the thread's first use of these sizes
          ms[i].push_back(elapsed);
          faults[i].push_back(static_cast<double>(f1 - f0));
        }
      }
      return absl::OkStatus();
    }();
  });
  loop.join();
  SCD_RETURN_IF_ERROR(status);
  for (size_t i = 0; i < n; ++i) {
    runs[i].ms = Median(ms[i]);
    runs[i].min_ms = *std::min_element(ms[i].begin(), ms[i].end());
    runs[i].faults = Median(faults[i]);
  }
  return runs;
}

}  // namespace

absl::StatusOr<RebuildBenchReport> RunRebuildBench(const RebuildBenchOptions& options) {
  if (options.rows < 1 || options.reps < 1 || options.modes.empty() || options.blocks.empty()) {
    return absl::InvalidArgumentError(
        "rebuild bench: rows and reps must be >= 1, with at least one mode and block size");
  }
  for (int b : options.blocks) {
    if (b < 0 && b != kWholeBlock) {
      return absl::InvalidArgumentError("rebuild bench: a block size is whole, 0 or rows");
    }
  }
  std::vector<CodecMode> modes;
  for (const std::string& name : options.modes) {
    const absl::StatusOr<CodecMode> mode = ParseCodecMode(name);
    if (!mode.ok() || *mode == CodecMode::kOracle) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rebuild bench: a mode that rebuilds (raw, quant8, quant4, recompute, scd-reuse, "
          "scd), not \"%s\"",
          name));
    }
    modes.push_back(*mode);
  }
  RebuildBenchReport report;
  report.options = options;
  SCD_ASSIGN_OR_RETURN(report.config, BenchShapeConfig(options.shape));
  if (options.rows > report.config.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rebuild bench: %d rows do not fit the context of %d", options.rows,
                        report.config.max_position_embeddings));
  }
  auto progress = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  progress(absl::StrFormat("synthetic %s weights", options.shape));
  const std::shared_ptr<const Model> model = MakeSyntheticModel(report.config, options.seed);
  std::shared_ptr<const ScdArtifact> artifact;
  if (std::any_of(modes.begin(), modes.end(), CodecModeNeedsArtifact)) {
    progress("fitting a timing artifact (random-token passages)");
    SCD_ASSIGN_OR_RETURN(artifact, TimingArtifact(model, options.seed));
  }
  const std::vector<int32_t> tokens =
      BenchPrompt(options.rows, options.seed, report.config.vocab_size);
  for (const CodecMode mode : modes) {
    progress(
        absl::StrFormat("encoding a %s payload of %d tokens", CodecModeName(mode), options.rows));
    SCD_ASSIGN_OR_RETURN(const Payload payload, EncodeBenchPayload(model, artifact, mode, tokens));
    SCD_ASSIGN_OR_RETURN(std::vector<RebuildBenchRun> runs,
                         RunMode(options, model, artifact, payload));
    for (RebuildBenchRun& r : runs) {
      progress(absl::StrFormat("%s, block %s (%zu rows): median %.1f ms, %.0f page faults", r.mode,
                               BlockName(r.block), r.block_rows, r.ms, r.faults));
      report.runs.push_back(std::move(r));
    }
  }
  return report;
}

std::string FormatRebuildBenchReport(const RebuildBenchReport& report, const std::string& command) {
  const RebuildBenchOptions& o = report.options;
  std::ostringstream md;
  md << "Command: `" << command << "`\n\n"
     << absl::StrFormat(
            "%s (synthetic weights), CPU backend: a payload of %d tokens per mode rebuilt by "
            "ConsumerCodec::Rebuild whole or in the codec's blocks of rows "
            "(CodecOptions::cpu_block_rows; default: about %d MiB of F32 K/V, at least %zu "
            "rows), on a thread of their own as the decode engine rebuilds; %d rounds after an "
            "untimed one, each round a rebuild at every block size in turn. Page faults: the "
            "process's minor faults per rebuild (median), the cache's first touch included. "
            "Buffers: one block's F32 K/V, every layer.\n\n",
            o.shape, o.rows, static_cast<int>(kCpuRebuildBlockBytes >> 20), kCpuRebuildMinBlockRows,
            o.reps)
     << "| mode | block | rows per block | blocks | rebuild, median (ms) | fastest (ms) | "
        "median vs whole | page faults | buffers (MiB) |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  std::ostringstream summary;
  summary << "host_rebuild_vs_whole";
  // The runs come mode by mode, each mode's in the order of `blocks`.
  const size_t per_mode = o.blocks.size();
  for (size_t m = 0; m + per_mode <= report.runs.size(); m += per_mode) {
    const auto first = report.runs.begin() + m, last = first + per_mode;
    const auto whole = std::find_if(
        first, last, [](const RebuildBenchRun& r) { return r.block == kWholeBlock && r.ms > 0; });
    bool summarized = false;
    for (auto r = first; r != last; ++r) {
      const bool ratio = whole != last;
      md << absl::StrFormat("| %s | %s | %zu | %zu | %.1f | %.1f | %s | %.0f | %.1f |\n", r->mode,
                            BlockName(r->block), r->block_rows, r->blocks, r->ms, r->min_ms,
                            ratio ? absl::StrFormat("%.2fx", r->ms / whole->ms) : "-", r->faults,
                            r->buffer_mib);
      if (ratio && !summarized && r->block != kWholeBlock) {
        summary << absl::StrFormat(" %s=%.2f", r->mode, r->ms / whole->ms);
        summarized = true;
      }
    }
  }
  md << "\n" << summary.str() << "\n";
  return md.str();
}

}  // namespace scd::bench
