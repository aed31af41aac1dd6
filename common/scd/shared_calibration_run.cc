// See shared_calibration_run.h.
#include "common/scd/shared_calibration_run.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/scd/model_pair.h"
#include "common/scd/rate_ladder.h"
#include "common/scd/shared_artifact.h"
#include "common/tokenizer/tokenizer.h"

namespace scd {
namespace {

struct Loaded {
  std::unique_ptr<Backend> producer;
  std::vector<std::unique_ptr<Backend>> consumers;
  std::unique_ptr<Tokenizer> tokenizer;  // the producer's: every model reads the same ids
};

absl::StatusOr<Loaded> LoadModels(const SharedCalibrationRun& run) {
  Loaded m;
  SCD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> producer, LoadModel(run.producer_dir));
  SCD_ASSIGN_OR_RETURN(m.producer, CreateBackend(BackendKind::kCpu, producer));
  SCD_ASSIGN_OR_RETURN(m.tokenizer, Tokenizer::FromFile(run.producer_dir + "/tokenizer.json"));
  for (const std::string& dir : run.consumer_dirs) {
    SCD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> consumer, LoadModel(dir));
    SCD_RETURN_IF_ERROR(CheckSameVocabulary(*producer, run.producer_dir, *consumer, dir));
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, CreateBackend(BackendKind::kCpu, consumer));
    m.consumers.push_back(std::move(b));
  }
  return m;
}

// Each consumer's selection sources: the --select-from files, or its own domain.
absl::StatusOr<std::vector<std::vector<int>>> SelectSources(
    const SharedCalibrationRun& run, Loaded& m, const std::vector<std::vector<int32_t>>& passages,
    const std::vector<int>& sources, const ProgressFn& progress) {
  std::vector<int> given;
  for (const std::string& name : run.select_from) {
    auto it = std::find(run.corpus.begin(), run.corpus.end(), name);
    if (it == run.corpus.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--select-from file ", name, " is not one of --corpus"));
    }
    given.push_back(static_cast<int>(it - run.corpus.begin()));
  }
  std::vector<std::vector<int>> select;
  for (auto& consumer : m.consumers) {
    if (!run.select_from.empty()) {
      select.push_back(given);
      continue;
    }
    SCD_ASSIGN_OR_RETURN(std::vector<int> domain,
                         ConsumerDomainSources(*m.producer, *consumer, passages, sources,
                                               static_cast<int>(run.corpus.size())));
    std::string names;
    for (int f : domain) absl::StrAppend(&names, " ", run.corpus[f]);
    if (progress) {
      progress(absl::StrCat(consumer->model().config.name, " selects on",
                            domain.empty() ? " every file (no domain of its own)" : names));
    }
    select.push_back(std::move(domain));
  }
  return select;
}

absl::Status WriteReports(const SharedArtifact& shared, const std::string& out) {
  nlohmann::json reports = nlohmann::json::object();
  std::string tables;
  for (const ScdArtifact& a : shared.consumers()) {
    reports[a.consumer_name] = a.report;
    absl::StrAppend(&tables, "## ", a.consumer_name, "\n\n",
                    QualityTableMarkdown(a.quality, RateLadder(a)), "\n");
  }
  const nlohmann::json j = {
      {"basis", {{"id", shared.basis_id()}, {"kind", shared.consumers()[0].basis_kind}}},
      {"consumers", reports}};
  SCD_RETURN_IF_ERROR(WriteFileAtomically(out + ".json", j.dump(2)));
  return WriteFileAtomically(out + ".quality.md", tables);
}

}  // namespace

absl::Status RunSharedCalibration(const SharedCalibrationRun& run, const ProgressFn& progress) {
  if (run.consumer_dirs.empty()) return absl::InvalidArgumentError("no consumer to calibrate");
  SCD_ASSIGN_OR_RETURN(Loaded m, LoadModels(run));
  std::vector<int> sources;
  SCD_ASSIGN_OR_RETURN(
      std::vector<std::vector<int32_t>> passages,
      LoadCalibrationPassages(run.corpus, *m.tokenizer, run.corpus_options, &sources));
  SCD_ASSIGN_OR_RETURN(std::vector<std::vector<int>> select,
                       SelectSources(run, m, passages, sources, progress));
  std::vector<std::vector<int32_t>> train;
  std::vector<std::vector<std::vector<int32_t>>> held;
  SplitHeldOutPerConsumer(std::move(passages), sources, select, run.options.holdout_passages,
                          &train, &held);
  std::vector<SharedConsumer> consumers;
  for (size_t c = 0; c < m.consumers.size(); ++c) {
    consumers.push_back({m.consumers[c].get(), std::move(held[c])});
  }
  if (progress) {
    progress(
        absl::StrFormat("%d training passages; %d consumer(s)", train.size(), consumers.size()));
  }
  SharedArtifact shared;
  if (!run.extend.empty()) {
    SCD_ASSIGN_OR_RETURN(shared, SharedArtifact::Load(run.extend));
    SCD_ASSIGN_OR_RETURN(SharedBasis basis, BasisOf(shared.consumers()[0]));
    for (const SharedConsumer& c : consumers) {
      SCD_ASSIGN_OR_RETURN(ScdArtifact a,
                           CalibrateOnBasis(*m.producer, c, train, run.options, basis, progress));
      SCD_RETURN_IF_ERROR(shared.Add(std::move(a)));
    }
  } else {
    SCD_ASSIGN_OR_RETURN(
        std::vector<ScdArtifact> artifacts,
        CalibrateShared(*m.producer, consumers, train, run.options, run.kind, progress));
    for (ScdArtifact& a : artifacts) SCD_RETURN_IF_ERROR(shared.Add(std::move(a)));
  }
  SCD_RETURN_IF_ERROR(shared.Save(run.out));
  return WriteReports(shared, run.out);
}

}  // namespace scd
