// Calibration on a shared producer basis: one producer, several consumers, one producer-side
// code for all of them (shared_basis.h), so that a context is prefilled and encoded once and
// the same payload serves every consumer.
//
// Each consumer's statistics are collected over the same training passages (the producer's
// states are then the same for all), the basis is fitted from all of them, and each consumer
// gets its own decoders, PATCH aligners, patch selection (on its own held-back passages: its
// own domain) and quality record, as in Calibrate. The artifacts record the basis's id.
#ifndef SCD_COMMON_SCD_SHARED_CALIBRATION_H_
#define SCD_COMMON_SCD_SHARED_CALIBRATION_H_

#include <vector>

#include "common/scd/calibration.h"
#include "common/scd/shared_basis.h"

namespace scd {

// The basis of `kind` for the consumers whose statistics are `data` (each collected with the
// same producer over the same passages), at the options' ranks K, V and H.
absl::StatusOr<SharedBasis> FitSharedBasis(const std::vector<const CalibrationData*>& data,
                                           const Model& producer, const CalibrationOptions& options,
                                           SharedBasisKind kind);

struct SharedConsumer {
  Backend* backend = nullptr;
  std::vector<std::vector<int32_t>> held;  // held-back passages for its selection
};

// One artifact per consumer, in `consumers`' order, all on one basis of `kind`.
absl::StatusOr<std::vector<ScdArtifact>> CalibrateShared(
    Backend& producer, const std::vector<SharedConsumer>& consumers,
    const std::vector<std::vector<int32_t>>& train, const CalibrationOptions& options,
    SharedBasisKind kind, const ProgressFn& progress = nullptr);

// The basis an artifact on a shared basis was fitted on: its encoders, checked against its
// recorded basis id. INVALID_ARGUMENT for a pair's own artifact, or one without a PATCH code
// at every layer.
absl::StatusOr<SharedBasis> BasisOf(const ScdArtifact& artifact);

// A consumer added to an existing basis later: calibrated as CalibrateShared calibrates each
// one, the basis's encoders (and ranks: the options' are replaced by the basis's) unchanged.
absl::StatusOr<ScdArtifact> CalibrateOnBasis(Backend& producer, const SharedConsumer& consumer,
                                             const std::vector<std::vector<int32_t>>& train,
                                             const CalibrationOptions& options,
                                             const SharedBasis& basis,
                                             const ProgressFn& progress = nullptr);

}  // namespace scd

#endif  // SCD_COMMON_SCD_SHARED_CALIBRATION_H_
