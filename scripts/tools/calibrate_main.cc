// scd-calibrate: fits the SCD artifact for one producer/consumer pair (offline, once per pair).
// All logic lives in common/scd (calibration.h, calibration_corpus.h); this main parses
// flags, shows progress on stderr and writes the artifact plus a JSON report beside it.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/scd/calibration.h"
#include "common/scd/calibration_corpus.h"
#include "common/scd/model_pair.h"
#include "common/scd/shared_calibration_run.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tools/cli/flags.h"

namespace {

constexpr char kProgram[] = "scd-calibrate";

// The files the held-back slice comes from when --select-from is not given: the consumer's
// domain (scd::ConsumerDomainSources), or every file when it has none. Says which on stderr.
absl::StatusOr<std::vector<int>> ChooseDomain(scd::Backend& producer, scd::Backend& consumer,
                                              const std::vector<std::vector<int32_t>>& passages,
                                              const std::vector<int>& sources,
                                              const std::vector<std::string>& files) {
  std::vector<double> gaps;
  absl::StatusOr<std::vector<int>> domain = scd::ConsumerDomainSources(
      producer, consumer, passages, sources, static_cast<int>(files.size()), 8, 0.1, &gaps);
  if (!domain.ok()) return domain.status();
  std::cerr << kProgram << ": NLL gap (producer - consumer, nats/token):";
  for (size_t f = 0; f < files.size(); ++f) std::cerr << " " << files[f] << " " << gaps[f] << ";";
  std::cerr << (domain->empty() ? " no file is the consumer's domain: selecting on all\n"
                                : " selecting on the consumer's domain (gap > 0.1)\n");
  return domain;
}

struct Flags {
  std::string producer_dir, consumer_dir, corpus, out, encoding = "int8", select_from, rescore;
  std::string consumers, shared_basis, extend;
  scd::CalibrationOptions o;
  scd::CorpusLoadOptions co;
  int max_total_tokens = static_cast<int>(scd::CorpusLoadOptions{}.max_total_tokens);
};

void AddFlags(scd::cli::FlagParser& flags, Flags& f) {
  scd::CalibrationOptions& o = f.o;
  flags.AddString("producer", &f.producer_dir, "producer (base) checkpoint directory", true);
  flags.AddString("consumer", &f.consumer_dir,
                  "consumer (specialist) checkpoint directory (or --consumers)");
  flags.AddString(
      "consumers", &f.consumers,
      "several consumers' checkpoint directories, comma-separated: one shared basis for "
      "all, one artifact file with a section each (--out)");
  flags.AddString("shared-basis", &f.shared_basis,
                  "the shared basis's kind with --consumers: pca (default) or stacked-rrr");
  flags.AddString("extend", &f.extend,
                  "a shared artifact: add --consumer (or --consumers) on its basis, unchanged, "
                  "and write the whole to --out");
  flags.AddString("corpus", &f.corpus, "calibration text files (TinyStories-style or bAbI format)",
                  true);
  flags.AddString("out", &f.out,
                  "artifact path (.safetensors); a .json report is written beside it", true);
  flags.AddInt("rank-k", &o.rank_k, "REUSE rank of pre-RoPE keys");
  flags.AddInt("rank-v", &o.rank_v, "REUSE rank of values");
  flags.AddInt("rank-h", &o.rank_h, "PATCH code rank of H_in");
  flags.AddInt("patch-layers", &o.patch_budget, "patch budget k (layers patched in scd mode)");
  flags.AddString("code-dtype", &f.encoding, "code encoding on the wire: int8 or fp16");
  flags.AddInt("aligner-steps", &o.aligner.steps, "Adam steps per PATCH aligner");
  flags.AddInt("aligner-hidden", &o.aligner.hidden_dim, "PATCH aligner MLP width");
  flags.AddInt("holdout", &o.holdout_passages, "passages held back for patch selection");
  flags.AddString("select-from", &f.select_from,
                  "corpus files (a subset of --corpus) the held-back slice is drawn from; "
                  "default: the consumer's domain, the files it models better than the producer");
  flags.AddInt("max-tokens", &f.max_total_tokens, "calibration token budget");
  flags.AddInt("passage-tokens", &f.co.max_tokens_per_passage,
               "truncate passages to this many tokens");
  flags.AddUint64("seed", &o.seed, "seed for sampling and aligner initialisation");
  flags.AddString("rescore", &f.rescore,
                  "an existing artifact of this pair: record its rate ladder's and the baselines' "
                  "held-back quality into --out instead of calibrating");
}

// The corpus's passages split into training and held-back ones (the held-back slice from
// --select-from, or the consumer's domain); *select_sources receives the files it came from.
absl::Status SplitCorpus(scd::ModelPair& pair, const Flags& f, std::vector<int>* select_sources,
                         std::vector<std::vector<int32_t>>* train,
                         std::vector<std::vector<int32_t>>* held) {
  const std::vector<std::string> files = absl::StrSplit(f.corpus, ',', absl::SkipEmpty());
  std::vector<int> sources;
  for (const auto& name : absl::StrSplit(f.select_from, ',', absl::SkipEmpty())) {
    auto it = std::find(files.begin(), files.end(), std::string(name));
    if (it == files.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--select-from file ", name, " is not one of --corpus"));
    }
    select_sources->push_back(static_cast<int>(it - files.begin()));
  }
  SCD_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> passages,
                       scd::LoadCalibrationPassages(files, *pair.tokenizer, f.co, &sources));
  if (f.select_from.empty()) {
    SCD_ASSIGN_OR_RETURN(*select_sources,
                         ChooseDomain(*pair.producer, *pair.consumer, passages, sources, files));
  }
  const size_t count = passages.size();
  scd::SplitHeldOut(std::move(passages), sources, *select_sources, f.o.holdout_passages, train,
                    held);
  std::cerr << kProgram << ": " << count << " passages from " << files.size() << " file(s); "
            << held->size() << " held back for selection\n";
  return absl::OkStatus();
}

// Writes the artifact, its JSON report and its quality table; says what it wrote.
absl::Status WriteOutputs(scd::ScdArtifact& artifact, const Flags& f,
                          const std::vector<int>& select_sources, double seconds,
                          const std::string& command) {
  SCD_RETURN_IF_ERROR(artifact.Save(f.out));
  const std::vector<std::string> files = absl::StrSplit(f.corpus, ',', absl::SkipEmpty());
  artifact.report["seconds"] = seconds;
  artifact.report[f.rescore.empty() ? "command" : "rescore_command"] = command;
  artifact.report["select_from"] = nlohmann::json::array();
  for (int i : select_sources) artifact.report["select_from"].push_back(files[i]);
  const std::string report_path = f.out + ".json", table_path = f.out + ".quality.md";
  SCD_RETURN_IF_ERROR(scd::WriteFileAtomically(report_path, artifact.report.dump(2)));
  SCD_RETURN_IF_ERROR(scd::WriteFileAtomically(
      table_path, scd::QualityTableMarkdown(artifact.quality, scd::RateLadder(artifact))));
  std::cerr << kProgram << ": wrote " << f.out << " (patch layers";
  for (int l : artifact.PatchLayers()) std::cerr << " " << l;
  std::cerr << "; recompute block [" << artifact.recompute_first << ", " << artifact.recompute_end
            << ")), " << report_path << " and " << table_path
            << " (held-back quality of every mode and rung) in " << seconds << " s\n";
  return absl::OkStatus();
}

// --consumers or --extend: one shared artifact (common/scd/shared_calibration_run.h).
int RunShared(const Flags& f, scd::cli::FlagParser& flags) {
  scd::SharedCalibrationRun run;
  run.producer_dir = f.producer_dir;
  run.consumer_dirs =
      absl::StrSplit(f.consumers.empty() ? f.consumer_dir : f.consumers, ',', absl::SkipEmpty());
  run.corpus = absl::StrSplit(f.corpus, ',', absl::SkipEmpty());
  run.select_from = absl::StrSplit(f.select_from, ',', absl::SkipEmpty());
  run.extend = f.extend;
  if (!f.shared_basis.empty()) {
    if (!f.extend.empty()) {
      return flags.UsageError("--shared-basis names a new basis; --extend keeps the artifact's");
    }
    auto kind = scd::ParseSharedBasisKind(f.shared_basis);
    if (!kind.ok())
      return flags.UsageError(absl::StrCat("--shared-basis: ", kind.status().message()));
    run.kind = *kind;
  }
  run.options = f.o;
  run.corpus_options = f.co;
  run.out = f.out;
  std::cerr << kProgram << ": " << run.consumer_dirs.size() << " consumer(s) on "
            << (f.extend.empty() ? "a new " + scd::SharedBasisKindName(run.kind) + " basis"
                                 : "the basis of " + f.extend)
            << "\n";
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = scd::RunSharedCalibration(
      run, [](const std::string& line) { std::cerr << "  " << line << "\n"; });
  if (!st.ok()) {
    return st.code() == absl::StatusCode::kInvalidArgument
               ? flags.UsageError(std::string(st.message()))
               : flags.Fail(st);
  }
  std::cerr << kProgram << ": wrote " << f.out << ", " << f.out << ".json and " << f.out
            << ".quality.md in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  scd::cli::FlagParser flags(
      kProgram, "--producer DIR --consumer DIR --corpus FILE[,FILE...] --out ARTIFACT");
  AddFlags(flags, f);
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (f.encoding == "int8") {
    f.o.code_encoding = scd::Encoding::kInt8Row;
  } else if (f.encoding == "fp16") {
    f.o.code_encoding = scd::Encoding::kF16;
  } else {
    return flags.UsageError(
        absl::StrCat("--code-dtype must be int8 or fp16, not \"", f.encoding, "\""));
  }
  f.co.max_total_tokens = f.max_total_tokens;
  f.co.seed = f.o.seed;
  if (f.consumer_dir.empty() == f.consumers.empty()) {
    return flags.UsageError("give one of --consumer and --consumers");
  }
  if (!f.rescore.empty() && (!f.consumers.empty() || !f.extend.empty())) {
    return flags.UsageError("--rescore takes one --consumer and no shared basis");
  }
  if (!f.consumers.empty() || !f.extend.empty()) return RunShared(f, flags);
  if (!f.shared_basis.empty()) return flags.UsageError("--shared-basis goes with --consumers");
  const auto start = std::chrono::steady_clock::now();
  auto pair = scd::LoadModelPair(f.producer_dir, f.consumer_dir);
  if (!pair.ok()) return flags.Fail(pair.status());
  std::vector<int> select_sources;
  std::vector<std::vector<int32_t>> train, held;
  if (absl::Status st = SplitCorpus(*pair, f, &select_sources, &train, &held); !st.ok()) {
    return st.code() == absl::StatusCode::kInvalidArgument
               ? flags.UsageError(std::string(st.message()))
               : flags.Fail(st);
  }
  auto progress = [](const std::string& line) { std::cerr << "  " << line << "\n"; };
  absl::StatusOr<scd::ScdArtifact> artifact;
  if (f.rescore.empty()) {
    std::cerr << kProgram << ": ranks K/V/H " << f.o.rank_k << "/" << f.o.rank_v << "/"
              << f.o.rank_h << ", patch budget " << f.o.patch_budget << ", codes " << f.encoding
              << "\n";
    artifact = scd::Calibrate(*pair->producer, *pair->consumer, train, held, f.o, progress);
  } else {
    artifact = scd::ScdArtifact::Load(f.rescore);
    if (artifact.ok()) {
      absl::Status st =
          scd::RecordArtifactQuality(*pair->producer, *pair->consumer, *artifact, held, progress);
      if (!st.ok()) artifact = st;
    }
  }
  if (!artifact.ok()) return flags.Fail(artifact.status());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  absl::Status st =
      WriteOutputs(*artifact, f, select_sources, seconds, scd::cli::QuotedCommandLine(argc, argv));
  return st.ok() ? 0 : flags.Fail(st);
}
