// ScdArtifact: everything calibration learns for one producer/consumer pair, saved as one
// safetensors file (matrices) whose `__metadata__["scd"]` holds JSON (dimensions, ranks,
// selected patch layers, the greedy selection trace, per-layer fit errors).
//
// Identity: the artifact records both models' digests (ComputeModelDigest). CheckPair refuses
// a model that is not the one the artifact was calibrated for — the handshake that keeps a
// consumer from rebuilding KV with another pair's decoders. `id` (SHA-256 of the saved
// tensors) goes into every payload's pair digest.
#ifndef SCD_COMMON_SCD_ARTIFACT_H_
#define SCD_COMMON_SCD_ARTIFACT_H_

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/weights.h"
#include "common/scd/patch_aligner.h"
#include "common/scd/quantize.h"
#include "common/scd/rate_ladder.h"
#include "common/scd/reduced_rank.h"

namespace scd {

struct ReuseLayer {
  LinearCode key;    // pre-RoPE keys: producer kv_dim → r_K → consumer kv_dim
  LinearCode value;  // values:        producer kv_dim → r_V → consumer kv_dim
};

struct PatchLayer {
  LinearCode code;       // H_in: producer d → r_H (encoder side; decoder = aligner's skip init)
  PatchAligner aligner;  // r_H → consumer d
};

struct ScdArtifact {
  std::string producer_digest, consumer_digest;
  std::string producer_name, consumer_name;
  int num_layers = 0;
  int hidden_size = 0;
  int kv_dim = 0;
  int rank_k = 0, rank_v = 0, rank_h = 0;
  Encoding code_encoding = Encoding::kInt8Row;  // how REUSE/PATCH codes travel
  std::vector<ReuseLayer> reuse;                // [num_layers]
  std::map<int, PatchLayer> patches;            // every layer with a fitted PATCH
  std::vector<int> patch_order;                 // greedy selection order
  int patch_budget = 0;                         // scd mode patches patch_order[0, budget)
  int recompute_first = 0, recompute_end = 0;   // DroidSpeak block [first, end)
  // Calibration's held-out record of every rung of the rate ladder and every baseline mode
  // (rate_ladder.h); empty in artifacts calibrated before the ladder.
  std::vector<QualityRecord> quality;
  // A code on a shared producer basis (shared_basis.h): its id (hex) and kind; empty for a
  // pair's own code. Artifacts of one basis encode alike: one payload serves them all.
  std::string basis_id, basis_kind;
  nlohmann::json report = nlohmann::json::object();
  std::string id;  // set by Save and Load

  std::vector<int> PatchLayers() const {
    return std::vector<int>(patch_order.begin(), patch_order.begin() + patch_budget);
  }

  absl::Status Save(const std::string& path);
  static absl::StatusOr<ScdArtifact> Load(const std::string& path);

  // FAILED_PRECONDITION naming both sides unless `producer` and `consumer` are the models
  // this artifact was calibrated for (either may be null to check one side only).
  absl::Status CheckPair(const Model* producer, const Model* consumer) const;
};

}  // namespace scd

#endif  // SCD_COMMON_SCD_ARTIFACT_H_
