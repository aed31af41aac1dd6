// PatchAligner: SCD's PATCH map (docs/METHOD.md, "PATCH"; SCD §3.3). The producer sends the
// rank-r_H code z = (H_P − μ_P) E_H of its normalised attention input; the consumer maps it
// into its own H_in space with a small MLP plus a linear skip,
//   Ĥ_C = f(z) = z A + c + W₂ silu(W₁ z + b₁) + b₂,
// and regenerates K = Ĥ_C W_Kᵀ, V = Ĥ_C W_Vᵀ with its own weights. The skip (A, c) starts at
// the reduced-rank regression decoder; W₂ starts at zero, so training only improves on it.
// Training minimises the error where it matters, in the consumer's K/V space:
//   L = mean ‖(Ĥ − H_C) Gᵀ‖²,  G = [W_K; W_V] of that layer,
// with Adam on minibatches, keeping the parameters with the best held-out loss.
#ifndef SCD_COMMON_SCD_PATCH_ALIGNER_H_
#define SCD_COMMON_SCD_PATCH_ALIGNER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/scd/reduced_rank.h"

namespace scd {

struct PatchAligner {
  int code_dim = 0;           // r_H
  int hidden_dim = 0;         // MLP width
  int out_dim = 0;            // d
  std::vector<float> a, c;    // skip: [r, d], [d]
  std::vector<float> w1, b1;  // [r, m], [m]
  std::vector<float> w2, b2;  // [m, d], [d]

  // h[rows, d] = f(z[rows, r]).
  void Apply(const float* z, int rows, float* h) const;
};

struct AlignerTrainOptions {
  int hidden_dim = 128;
  int steps = 1500;
  int batch = 256;
  float learning_rate = 2e-3f;
  float weight_decay = 0.0f;
  float holdout = 0.1f;  // share of rows kept for early stopping
  uint64_t seed = 1;
};

struct AlignerReport {
  double linear_loss = 0;    // held-out loss of the RRR skip alone
  double trained_loss = 0;   // held-out loss of the trained aligner (<= linear_loss)
  double target_energy = 0;  // held-out mean ‖(H_C − μ) Gᵀ‖², for relative figures
};

// Trains an aligner from codes z [n, r] to consumer states h_c [n, d], initialised from
// `linear` (the RRR fit whose decoder maps z to h_c). `kv_proj` is G [g, d].
absl::StatusOr<PatchAligner> TrainPatchAligner(const std::vector<float>& z,
                                               const std::vector<float>& h_c, int n,
                                               const LinearCode& linear,
                                               const std::vector<float>& kv_proj, int g,
                                               const AlignerTrainOptions& options,
                                               AlignerReport* report);

}  // namespace scd

#endif  // SCD_COMMON_SCD_PATCH_ALIGNER_H_
