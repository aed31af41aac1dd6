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
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/scd/calibration.h"
#include "common/scd/calibration_corpus.h"
#include "common/scd/model_pair.h"
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

}  // namespace

int main(int argc, char** argv) {
  std::string producer_dir, consumer_dir, corpus, out, encoding = "int8", select_from;
  scd::CalibrationOptions o;
  scd::CorpusLoadOptions co;
  int max_total_tokens = static_cast<int>(co.max_total_tokens);
  scd::cli::FlagParser flags(kProgram,
                             "--producer DIR --consumer DIR --corpus FILE[,FILE...] --out ARTIFACT");
  flags.AddString("producer", &producer_dir, "producer (base) checkpoint directory", true);
  flags.AddString("consumer", &consumer_dir, "consumer (specialist) checkpoint directory", true);
  flags.AddString("corpus", &corpus, "calibration text files (TinyStories-style or bAbI format)", true);
  flags.AddString("out", &out, "artifact path (.safetensors); a .json report is written beside it", true);
  flags.AddInt("rank-k", &o.rank_k, "REUSE rank of pre-RoPE keys");
  flags.AddInt("rank-v", &o.rank_v, "REUSE rank of values");
  flags.AddInt("rank-h", &o.rank_h, "PATCH code rank of H_in");
  flags.AddInt("patch-layers", &o.patch_budget, "patch budget k (layers patched in scd mode)");
  flags.AddString("code-dtype", &encoding, "code encoding on the wire: int8 or fp16");
  flags.AddInt("aligner-steps", &o.aligner.steps, "Adam steps per PATCH aligner");
  flags.AddInt("aligner-hidden", &o.aligner.hidden_dim, "PATCH aligner MLP width");
  flags.AddInt("holdout", &o.holdout_passages, "passages held back for patch selection");
  flags.AddString("select-from", &select_from,
                  "corpus files (a subset of --corpus) the held-back slice is drawn from; "
                  "default: the consumer's domain, the files it models better than the producer");
  flags.AddInt("max-tokens", &max_total_tokens, "calibration token budget");
  flags.AddInt("passage-tokens", &co.max_tokens_per_passage, "truncate passages to this many tokens");
  flags.AddUint64("seed", &o.seed, "seed for sampling and aligner initialisation");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (encoding == "int8") {
    o.code_encoding = scd::Encoding::kInt8Row;
  } else if (encoding == "fp16") {
    o.code_encoding = scd::Encoding::kF16;
  } else {
    return flags.UsageError(
        absl::StrCat("--code-dtype must be int8 or fp16, not \"", encoding, "\""));
  }
  co.max_total_tokens = max_total_tokens;
  co.seed = o.seed;
  const auto start = std::chrono::steady_clock::now();
  auto pair = scd::LoadModelPair(producer_dir, consumer_dir);
  if (!pair.ok()) return flags.Fail(pair.status());
  auto& tokenizer = pair->tokenizer;
  auto& producer = pair->producer;
  auto& consumer = pair->consumer;

  std::vector<std::string> files = absl::StrSplit(corpus, ',', absl::SkipEmpty());
  std::vector<int> sources, select_sources;
  for (const auto& f : absl::StrSplit(select_from, ',', absl::SkipEmpty())) {
    auto it = std::find(files.begin(), files.end(), std::string(f));
    if (it == files.end()) {
      return flags.UsageError(absl::StrCat("--select-from file ", f, " is not one of --corpus"));
    }
    select_sources.push_back(static_cast<int>(it - files.begin()));
  }
  auto passages = scd::LoadCalibrationPassages(files, *tokenizer, co, &sources);
  if (!passages.ok()) return flags.Fail(passages.status());
  if (select_from.empty()) {
    absl::StatusOr<std::vector<int>> domain =
        ChooseDomain(*producer, *consumer, *passages, sources, files);
    if (!domain.ok()) return flags.Fail(domain.status());
    select_sources = *domain;
  }
  std::vector<std::vector<int32_t>> train, held;
  const size_t count = passages->size();
  scd::SplitHeldOut(std::move(passages).value(), sources, select_sources, o.holdout_passages,
                    &train, &held);
  std::cerr << kProgram << ": " << count << " passages from " << files.size()
            << " file(s); ranks K/V/H " << o.rank_k << "/" << o.rank_v << "/" << o.rank_h
            << ", patch budget " << o.patch_budget << ", codes " << encoding << "; "
            << held.size() << " held back for selection\n";
  auto artifact = scd::Calibrate(*producer, *consumer, train, held, o,
                                 [](const std::string& line) { std::cerr << "  " << line << "\n"; });
  if (!artifact.ok()) return flags.Fail(artifact.status());
  if (auto st = artifact->Save(out); !st.ok()) return flags.Fail(st);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  artifact->report["seconds"] = seconds;
  artifact->report["command"] = scd::cli::QuotedCommandLine(argc, argv);
  artifact->report["select_from"] = nlohmann::json::array();
  for (int f : select_sources) artifact->report["select_from"].push_back(files[f]);
  const std::string report_path = out + ".json", table_path = out + ".quality.md";
  if (auto st = scd::WriteFileAtomically(report_path, artifact->report.dump(2)); !st.ok()) {
    return flags.Fail(st);
  }
  const std::string table = scd::QualityTableMarkdown(artifact->quality, scd::RateLadder(*artifact));
  if (auto st = scd::WriteFileAtomically(table_path, table); !st.ok()) return flags.Fail(st);
  std::cerr << kProgram << ": wrote " << out << " (patch layers";
  for (int l : artifact->PatchLayers()) std::cerr << " " << l;
  std::cerr << "; recompute block [" << artifact->recompute_first << ", "
            << artifact->recompute_end << ")), " << report_path << " and " << table_path
            << " (held-back quality of every mode and rung) in " << seconds << " s\n";
  return 0;
}
