// A producer-side code shared by several consumers: one encoder per layer and state (K, V or
// H_in) for every consumer of one producer, and each consumer's own decoder on its codes, so
// that one payload serves them all (one prefill, one encode, one prefix-cache entry).
//
// The encoder, two ways (SharedBasisKind):
//   - kStackedRrr: reduced-rank regression (reduced_rank.h) against the consumers' targets
//     side by side, Y = [Y_1/‖Ỹ_1‖, …, Y_K/‖Ỹ_K‖], each scaled to unit centred energy so that
//     every consumer's relative error weighs alike: B = (Cxx + λI)⁻¹ Cxy, E = B V_r with V_r
//     the top r eigenvectors of Bᵀ Cxx B. With one consumer it is that pair's own encoder.
//   - kPca: the top r principal directions of the producer's states, E = U_r (eigenvectors of
//     Cxx): blind to every consumer, so a consumer added later loses nothing by it.
// Each consumer's decoder is then least squares on the codes, D_c = (Eᵀ Cxx E)⁻¹ Eᵀ Cxy_c
// (with a tiny ridge), μ_out its own mean. In both bases the codes' columns are uncorrelated on
// the calibration data (Eᵀ Cxx E is diagonal, up to the ridge), so the first r' columns with the
// first r' rows of D_c are the rank-r' least-squares fit: the rate ladder still nests.
#ifndef SCD_COMMON_SCD_SHARED_BASIS_H_
#define SCD_COMMON_SCD_SHARED_BASIS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/scd/reduced_rank.h"

namespace scd {

enum class SharedBasisKind { kStackedRrr, kPca };

// One producer's shared basis for every layer: the REUSE encoders of pre-RoPE K and of V, and
// the PATCH encoder of H_in (each a LinearCode with in_dim, rank, mu_in and encoder; no
// decoder). `id` names it in artifacts (BasisId).
struct SharedBasis {
  SharedBasisKind kind = SharedBasisKind::kStackedRrr;
  std::string producer_digest;
  std::vector<LinearCode> key, value, h_in;  // [layer]
  std::string id;
};

// SHA-256 (hex) over the producer's digest and every encoder's and μ_in's bytes, in layer
// order: equal for two artifacts exactly when their producer-side codes are.
std::string BasisId(const SharedBasis& basis);

absl::StatusOr<SharedBasisKind> ParseSharedBasisKind(const std::string& name);
std::string SharedBasisKindName(SharedBasisKind kind);

// The shared encoder of rank `rank` for the consumers whose statistics are `moments` (each
// over the same producer states: INVALID_ARGUMENT otherwise). The result is a LinearCode with
// in_dim, rank, mu_in and encoder set; out_dim 0, no decoder. `ridge` as in CrossMoments::Fit.
absl::StatusOr<LinearCode> FitSharedEncoder(const std::vector<const CrossMoments*>& moments,
                                            int rank, double ridge, SharedBasisKind kind);

// One consumer's code on `basis` (FitSharedEncoder's, or one read back from an artifact): the
// basis's encoder and μ_in, and the least-squares decoder. FAILED_PRECONDITION when `moments`
// are over producer states of another width.
absl::StatusOr<LinearCode> FitDecoderOnBasis(const CrossMoments& moments, const LinearCode& basis,
                                             FitReport* report = nullptr);

}  // namespace scd

#endif  // SCD_COMMON_SCD_SHARED_BASIS_H_
