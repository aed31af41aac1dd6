// SekvArtifact: the calibrated zoom router of one consumer model, saved as a safetensors file
// (router.p_q and router.p_k [L, G, r, head_dim], router.gate [L, G, 4] = w_size, w_share,
// bias, τ) whose `__metadata__["sekv"]` JSON holds the format version, the model's name and
// digest, the shape, the SHA-256 of the tensor bytes and the calibration report.
//
// Load rejects a file that is truncated or corrupt (the safetensors checks, then the tensor
// digest, so a flipped byte inside a tensor is caught too), has the wrong shapes, or holds
// non-finite values. CheckModel refuses a router calibrated for another model.
#ifndef SCD_COMMON_SEKV_SEKV_ARTIFACT_H_
#define SCD_COMMON_SEKV_SEKV_ARTIFACT_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "common/model/weights.h"
#include "common/sekv/zoom_router.h"

namespace scd::sekv {

struct SekvArtifact {
  std::string model_name, model_digest;
  ZoomRouter router;
  nlohmann::json report = nlohmann::json::object();

  absl::Status Save(const std::string& path) const;
  static absl::StatusOr<SekvArtifact> Load(const std::string& path);
  // FAILED_PRECONDITION unless `model` is the one this router was calibrated for.
  absl::Status CheckModel(const Model& model) const;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SEKV_ARTIFACT_H_
