// scd-calibrate's shared-basis runs (--consumers, --extend): checkpoints and corpus in, one
// shared artifact file out (shared_artifact.h).
//   - New basis: every consumer's statistics over the same training passages, the basis of
//     `kind` from all of them, then each consumer's decoders, aligners, patch selection and
//     quality record; each consumer holds back its own passages for selection (from
//     `select_from`, or the corpus files it models better than the producer:
//     ConsumerDomainSources).
//   - Extend: the consumers are added to the basis of the artifact at `extend`, whose
//     sections and basis tensors stay as they are.
#ifndef SCD_COMMON_SCD_SHARED_CALIBRATION_RUN_H_
#define SCD_COMMON_SCD_SHARED_CALIBRATION_RUN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/scd/calibration_corpus.h"
#include "common/scd/shared_calibration.h"

namespace scd {

struct SharedCalibrationRun {
  std::string producer_dir;
  std::vector<std::string> consumer_dirs;
  std::vector<std::string> corpus;       // text files
  std::vector<std::string> select_from;  // a subset of corpus; empty: each consumer's domain
  std::string extend;                    // a shared artifact to add the consumers to
  // PCA by measurement (docs/RESULTS.md, "One basis for two specialists"): on the bundled pair
  // it keeps bAbI qa1 F1 at 99.6% of the pair's own code, stacked regression at 92%.
  SharedBasisKind kind = SharedBasisKind::kPca;
  CalibrationOptions options;
  CorpusLoadOptions corpus_options;
  std::string out;  // the shared artifact written (may equal `extend`)
};

// Runs it and writes `out`, `out`.json (each section's report) and `out`.quality.md (each
// section's quality table). INVALID_ARGUMENT for flags that do not fit together.
absl::Status RunSharedCalibration(const SharedCalibrationRun& run, const ProgressFn& progress);

}  // namespace scd

#endif  // SCD_COMMON_SCD_SHARED_CALIBRATION_RUN_H_
