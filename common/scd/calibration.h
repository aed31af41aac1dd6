// Calibration: fits an ScdArtifact for one producer/consumer pair, offline (docs/METHOD.md; SCD
// §3.2–3.4). Both models prefill the same token sequences; then
//   1. REUSE: per layer, reduced-rank regression from producer to consumer pre-RoPE keys and
//      values (separate ranks r_K, r_V), from streamed second moments;
//   2. PATCH: per layer, a rank-r_H code of the producer's H_in (RRR towards the consumer's
//      H_in) and a PatchAligner MLP trained with Adam in the consumer's K/V metric;
//   3. selection: greedy over layers by measured end-to-end effect — the consumer's next-token
//      KL to its own full prefill (the Oracle) on held-back passages, rebuilt through the real
//      codec path (the artifact's code encoding included) — and the same measurement picks
//      the DroidSpeak recompute block for the recompute baseline.
// The selection trace and every per-layer fit error go into the artifact's report.
#ifndef SCD_COMMON_SCD_CALIBRATION_H_
#define SCD_COMMON_SCD_CALIBRATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"
#include "common/scd/artifact.h"
#include "common/scd/codec.h"
#include "common/scd/shared_basis.h"

namespace scd {

struct CalibrationOptions {
  int rank_k = 16;
  int rank_v = 24;
  int rank_h = 32;
  int patch_budget = 3;      // k: layers patched in scd mode
  int selection_depth = -1;  // greedy steps to record (-1 = every layer, for the ablation)
  Encoding code_encoding = Encoding::kInt8Row;  // wire type of codes (fp16 is the option)
  double ridge = 1e-4;                          // relative ridge of the regressions
  int holdout_passages = 24;                    // passages held back for selection
  int max_aligner_rows = 30000;
  AlignerTrainOptions aligner;
  int recompute_block = -1;  // DroidSpeak block length (-1 = patch_budget, at least 1)
  uint64_t seed = 1;
};

// The consumer's domain among the corpus files: each file's mean next-token NLL under both
// models, on up to `per_file` of its passages (sources[i] is passage i's file, as
// LoadCalibrationPassages gives it), and the files on which the consumer's is lower than the
// producer's by more than `margin` nats a token: what the specialist was tuned on. Empty when
// no file qualifies. `gaps`, when given, receives producer − consumer NLL per file (0 for a
// file with no passage).
absl::StatusOr<std::vector<int>> ConsumerDomainSources(
    Backend& producer, Backend& consumer, const std::vector<std::vector<int32_t>>& passages,
    const std::vector<int>& sources, int num_files, int per_file = 8, double margin = 0.1,
    std::vector<double>* gaps = nullptr);

// End-to-end quality of one codec configuration on the held-back passages.
struct SelectionScore {
  double kl = 0;    // mean KL(oracle ‖ rebuilt) of the consumer's next-token distributions
  double nll = 0;   // mean NLL of the scored tokens after rebuild
  double top1 = 0;  // share of positions whose argmax matches the oracle's
  double bytes_per_token = 0;  // serialized payload bytes per context token
};

using ProgressFn = std::function<void(const std::string&)>;

// Scores every baseline mode and every rung of `a`'s rate ladder on the held-back passages into
// a.quality, as Calibrate does at its end: for an artifact calibrated before the rate ladder.
absl::Status RecordArtifactQuality(Backend& producer, Backend& consumer, ScdArtifact& a,
                                   const std::vector<std::vector<int32_t>>& held,
                                   const ProgressFn& progress = nullptr);

// Paired statistics of both models on the training passages: per-layer second moments of
// (K_P, K_C), (V_P, V_C), (H_P, H_C), and a reservoir sample of H_in row pairs for the
// aligners. Fitting at other ranks (ablations) reuses it without re-running the models.
struct CalibrationData {
  std::vector<CrossMoments> key, value, h_in;
  std::vector<std::vector<float>> h_producer, h_consumer;  // [layer][rows * d]
  long tokens = 0;
  int passages = 0;
};

absl::StatusOr<CalibrationData> CollectCalibrationData(
    Backend& producer, Backend& consumer, const std::vector<std::vector<int32_t>>& passages,
    const CalibrationOptions& options, const ProgressFn& progress = nullptr);

// Fits REUSE for every layer and, with fit_patches, PATCH for every layer. No selection:
// patch_order is empty and recompute block [0, 0). With `basis` (shared_basis.h), the encoders
// are the basis's and only the decoders (and aligners) are fitted, and the artifact records the
// basis; its ranks must be the options' ranks.
absl::StatusOr<ScdArtifact> FitArtifact(const CalibrationData& data, const Model& producer,
                                        const Model& consumer, const CalibrationOptions& options,
                                        bool fit_patches, const ProgressFn& progress = nullptr,
                                        const SharedBasis* basis = nullptr);

// Greedy patch-layer selection and the recompute block, scored on `held` passages; writes
// patch_order, patch_budget, the recompute block and the trace into `artifact`.
absl::Status SelectLayers(Backend& producer, Backend& consumer, ScdArtifact& artifact,
                          const std::vector<std::vector<int32_t>>& held,
                          const CalibrationOptions& options, const ProgressFn& progress = nullptr);

// The whole calibration on `train`, with patch selection scored on `held`.
absl::StatusOr<ScdArtifact> Calibrate(Backend& producer, Backend& consumer,
                                      const std::vector<std::vector<int32_t>>& train,
                                      const std::vector<std::vector<int32_t>>& held,
                                      const CalibrationOptions& options,
                                      const ProgressFn& progress = nullptr);

// The whole calibration: the last `holdout_passages` passages are held back for selection.
// `passages` are token sequences (BOS first), each at most the models' context.
absl::StatusOr<ScdArtifact> Calibrate(Backend& producer, Backend& consumer,
                                      const std::vector<std::vector<int32_t>>& passages,
                                      const CalibrationOptions& options,
                                      const ProgressFn& progress = nullptr);

// Scores `mode` with `codec_options` on `passages`: the producer's codes cover the first half
// of each passage, the consumer prefills the second half on top, and its next-token
// distributions there are compared with its own full prefill.
absl::StatusOr<SelectionScore> ScoreCodec(Backend& producer, Backend& consumer,
                                          std::shared_ptr<const ScdArtifact> artifact,
                                          CodecMode mode, const CodecOptions& codec_options,
                                          const std::vector<std::vector<int32_t>>& passages);

}  // namespace scd

#endif  // SCD_COMMON_SCD_CALIBRATION_H_
