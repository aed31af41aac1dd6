// LinearCode and its closed-form fit: SCD's REUSE map (docs/METHOD.md, "REUSE"; SCD §3.2).
// A producer state x ∈ R^p is sent as the rank-r code z = (x − μ_P) E and the consumer reads
// ŷ = z D + μ_C ∈ R^q. E and D solve the reduced-rank regression
//   min ‖(X_P − μ_P) E D + μ_C − X_C‖²  s.t. rank(ED) ≤ r
// in closed form: B = (X̃_Pᵀ X̃_P + λI)⁻¹ X̃_Pᵀ X̃_C, V_r = top-r right singular vectors of
// X̃_P B (eigenvectors of Bᵀ X̃_Pᵀ X̃_P B), E = B V_r, D = V_rᵀ.
// Only second moments are needed, so calibration streams states through CrossMoments and
// never holds them all.
//
// Codes are nested: the columns of E (rows of D) are ordered by the singular values of X̃_P B,
// largest first, so the first r' columns of a rank-r code are the rank-r' fit itself (the
// same B, the top r' of the same eigenvectors). A payload may so carry any r' ≤ r with no
// recalibration (common/scd/rate_ladder.h).
#ifndef SCD_COMMON_SCD_REDUCED_RANK_H_
#define SCD_COMMON_SCD_REDUCED_RANK_H_

#include <vector>

#include "absl/status/statusor.h"
#include "common/scd/linalg.h"

namespace scd {

struct LinearCode {
  int in_dim = 0;
  int out_dim = 0;
  int rank = 0;
  std::vector<float> mu_in;    // [in_dim]
  std::vector<float> encoder;  // [in_dim, rank]
  std::vector<float> decoder;  // [rank, out_dim]
  std::vector<float> mu_out;   // [out_dim]

  // z[rows, r'] = (x[rows, in_dim] − μ_in) · E[:, :r'], with r' = `use_rank` (-1: rank).
  void Encode(const float* x, int rows, float* z, int use_rank = -1) const;
  // y[rows, out_dim] = z[rows, r'] · D[:r', :] + μ_out, with r' = `use_rank` (-1: rank).
  void Decode(const float* z, int rows, float* y, int use_rank = -1) const;
};

struct FitReport {
  double relative_error = 0;      // ‖Ŷ − Y‖² / ‖Y − μ_Y‖² on the fitted data
  double raw_relative_error = 0;  // ‖X − Y‖² / ‖Y − μ_Y‖² (reusing X as-is); p == q only
  double energy_kept = 0;         // share of ‖X̃B‖² that the top-r directions keep
};

// The closed form above on centred moments Cxx [p, p] and Cxy [p, q]: B = (Cxx + λI)⁻¹ Cxy,
// the eigendecomposition of Bᵀ Cxx B, V_r (its top `rank` eigenvectors, [q, rank]) and the
// encoder E = B V_r ([p, rank]).
struct ReducedRankSolution {
  linalg::Eigen eigen;
  std::vector<double> vr, encoder;
};
absl::StatusOr<ReducedRankSolution> SolveReducedRank(const std::vector<double>& cxx,
                                                     const std::vector<double>& cxy, int p, int q,
                                                     int rank, double lambda);

// Streaming first and second moments of paired rows (x ∈ R^p, y ∈ R^q), in double.
class CrossMoments {
 public:
  CrossMoments(int p, int q);
  void Add(const float* x, const float* y, int rows);
  long count() const { return count_; }
  int p() const { return p_; }
  int q() const { return q_; }

  // Fits the rank-`rank` code. `ridge` is relative: λ = ridge · tr(X̃ᵀX̃) / p.
  absl::StatusOr<LinearCode> Fit(int rank, double ridge, FitReport* report = nullptr) const;

  // The means and centred second moments (C = S − n μ μᵀ), with the traces of Cxx and Cyy.
  struct Centred {
    std::vector<double> mx, my, cxx, cxy, cyy;
    double trace_xx = 0, trace_yy = 0;
  };
  Centred Centre() const;
  // ‖Ŷ − Y‖² / ‖Y − μ_Y‖² of `code` (its own μ_in and μ_out equal to the means) on these data;
  // and of reusing X as-is (-1 when p ≠ q).
  double RelativeError(const Centred& c, const LinearCode& code) const;
  double RawRelativeError(const Centred& c) const;

 private:
  int p_, q_;
  long count_ = 0;
  std::vector<double> sx_, sy_;          // sums
  std::vector<double> sxx_, sxy_, syy_;  // uncentred cross products
};

}  // namespace scd

#endif  // SCD_COMMON_SCD_REDUCED_RANK_H_
