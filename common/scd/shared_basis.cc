// See shared_basis.h.
#include "common/scd/shared_basis.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/sha256.h"
#include "common/base/status_macros.h"
#include "common/scd/linalg.h"

namespace scd {
namespace {

// Whether two consumers' statistics were taken over the same producer states: the same count,
// means and Cxx up to rounding (the producer's prefill is deterministic).
bool SameProducerStates(const CrossMoments& a, const CrossMoments::Centred& ca,
                        const CrossMoments& b, const CrossMoments::Centred& cb) {
  if (a.p() != b.p() || a.count() != b.count()) return false;
  const double tol = 1e-9 * std::max(ca.trace_xx, 1e-30);
  for (size_t i = 0; i < ca.cxx.size(); ++i) {
    if (std::fabs(ca.cxx[i] - cb.cxx[i]) > tol) return false;
  }
  for (size_t i = 0; i < ca.mx.size(); ++i) {
    if (std::fabs(ca.mx[i] - cb.mx[i]) > 1e-9 * (1 + std::fabs(ca.mx[i]))) return false;
  }
  return true;
}

// E = B V_r for B = (Cxx + λI)⁻¹ [Cxy_1/s_1, …, Cxy_K/s_K], s_c = √tr(Cyy_c).
absl::StatusOr<std::vector<double>> StackedEncoder(const std::vector<CrossMoments::Centred>& cs,
                                                   const std::vector<const CrossMoments*>& ms,
                                                   int rank, double lambda) {
  const int p = ms[0]->p();
  int q_all = 0;
  for (const CrossMoments* m : ms) q_all += m->q();
  std::vector<double> cxy(static_cast<size_t>(p) * q_all);
  int col = 0;
  for (size_t k = 0; k < ms.size(); ++k) {
    const int q = ms[k]->q();
    const double s = 1 / std::sqrt(std::max(cs[k].trace_yy, 1e-30));
    for (int i = 0; i < p; ++i)
      for (int j = 0; j < q; ++j) {
        cxy[static_cast<size_t>(i) * q_all + col + j] =
            s * cs[k].cxy[static_cast<size_t>(i) * q + j];
      }
    col += q;
  }
  SCD_ASSIGN_OR_RETURN(ReducedRankSolution sol,
                       SolveReducedRank(cs[0].cxx, cxy, p, q_all, rank, lambda));
  return sol.encoder;
}

// E = U_r, the top r eigenvectors of Cxx.
absl::StatusOr<std::vector<double>> PcaEncoder(const CrossMoments::Centred& c, int p, int rank) {
  SCD_ASSIGN_OR_RETURN(linalg::Eigen eig, linalg::SymmetricEigen(c.cxx, p));
  std::vector<double> e(static_cast<size_t>(p) * rank);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < rank; ++j)
      e[static_cast<size_t>(i) * rank + j] = eig.vectors[static_cast<size_t>(i) * p + j];
  return e;
}

}  // namespace

std::string BasisId(const SharedBasis& basis) {
  Sha256 h;
  h.Update(basis.producer_digest);
  for (const std::vector<LinearCode>* codes : {&basis.key, &basis.value, &basis.h_in}) {
    for (const LinearCode& c : *codes) {
      const int32_t dims[2] = {c.in_dim, c.rank};
      h.Update(dims, sizeof dims);
      h.Update(c.mu_in.data(), c.mu_in.size() * sizeof(float));
      h.Update(c.encoder.data(), c.encoder.size() * sizeof(float));
    }
  }
  return Sha256::ToHex(h.Finish());
}

absl::StatusOr<SharedBasisKind> ParseSharedBasisKind(const std::string& name) {
  if (name == "stacked-rrr") return SharedBasisKind::kStackedRrr;
  if (name == "pca") return SharedBasisKind::kPca;
  return absl::InvalidArgumentError(
      absl::StrCat("shared basis \"", name, "\" is not stacked-rrr or pca"));
}

std::string SharedBasisKindName(SharedBasisKind kind) {
  return kind == SharedBasisKind::kPca ? "pca" : "stacked-rrr";
}

absl::StatusOr<LinearCode> FitSharedEncoder(const std::vector<const CrossMoments*>& moments,
                                            int rank, double ridge, SharedBasisKind kind) {
  if (moments.empty()) return absl::InvalidArgumentError("a shared basis needs a consumer");
  const int p = moments[0]->p();
  int q_min = moments[0]->q();
  for (const CrossMoments* m : moments) q_min = std::min(q_min, m->q());
  if (rank <= 0 || rank > std::min(p, q_min)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " must be in [1, min(", p, ", ", q_min, ")]"));
  }
  if (moments[0]->count() < 2) {
    return absl::FailedPreconditionError("calibration needs at least two states");
  }
  std::vector<CrossMoments::Centred> cs;
  for (const CrossMoments* m : moments) cs.push_back(m->Centre());
  for (size_t k = 1; k < moments.size(); ++k) {
    if (!SameProducerStates(*moments[0], cs[0], *moments[k], cs[k])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "consumer ", k,
          "'s statistics are over other producer states than consumer 0's: a "
          "shared basis needs every consumer calibrated on the same producer and passages"));
    }
  }
  const double lambda = std::max(ridge * cs[0].trace_xx / p, 1e-12);
  std::vector<double> e;
  if (kind == SharedBasisKind::kPca) {
    SCD_ASSIGN_OR_RETURN(e, PcaEncoder(cs[0], p, rank));
  } else {
    SCD_ASSIGN_OR_RETURN(e, StackedEncoder(cs, moments, rank, lambda));
  }
  LinearCode basis;
  basis.in_dim = p;
  basis.rank = rank;
  basis.mu_in.assign(cs[0].mx.begin(), cs[0].mx.end());
  basis.encoder.assign(e.begin(), e.end());
  return basis;
}

absl::StatusOr<LinearCode> FitDecoderOnBasis(const CrossMoments& moments, const LinearCode& basis,
                                             FitReport* report) {
  const int p = moments.p(), q = moments.q(), r = basis.rank;
  if (basis.in_dim != p || basis.encoder.size() != static_cast<size_t>(p) * r) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shared basis reads producer states of width ", basis.in_dim, ", these are ", p));
  }
  if (moments.count() < 2)
    return absl::FailedPreconditionError("calibration needs at least two states");
  const CrossMoments::Centred c = moments.Centre();
  // The basis's μ_in is the producer's mean on its own calibration data; a consumer fitted
  // later (on other passages) centres on it too, so its codes are the basis's codes.
  std::vector<double> shift(p);
  for (int i = 0; i < p; ++i) shift[i] = c.mx[i] - basis.mu_in[i];
  const std::vector<double> e(basis.encoder.begin(), basis.encoder.end());
  // Codes z = (x − μ_basis) E: Cov(z) = Eᵀ Cxx E, Cov(z, y) = Eᵀ Cxy, mean(z) = shiftᵀ E.
  const std::vector<double> cxx_e = linalg::MatMul(c.cxx, e, p, r, p);
  const std::vector<double> czz = linalg::MatMul(e, cxx_e, r, r, p, /*trans_a=*/true);
  const std::vector<double> czy = linalg::MatMul(e, c.cxy, r, q, p, /*trans_a=*/true);
  double trace_zz = 0;
  for (int j = 0; j < r; ++j) trace_zz += czz[static_cast<size_t>(j) * r + j];
  SCD_ASSIGN_OR_RETURN(std::vector<double> d,
                       linalg::SolveSpd(czz, czy, r, q, std::max(1e-10 * trace_zz / r, 1e-12)));
  const std::vector<double> mz = linalg::MatMul(shift, e, 1, r, p);
  LinearCode code = basis;
  code.out_dim = q;
  code.decoder.assign(d.begin(), d.end());
  // ŷ = z D + μ_out with μ_out = mean(y) − mean(z) D, so that the fit is centred on these data.
  code.mu_out.resize(q);
  for (int j = 0; j < q; ++j) {
    double m = c.my[j];
    for (int k = 0; k < r; ++k) m -= mz[k] * d[static_cast<size_t>(k) * q + j];
    code.mu_out[j] = static_cast<float>(m);
  }
  if (report != nullptr) {
    // On data centred at its own mean the error depends on E D alone, not on μ.
    report->relative_error = moments.RelativeError(c, code);
    report->raw_relative_error = moments.RawRelativeError(c);
    double kept = 0;
    const std::vector<double> w = linalg::MatMul(e, d, p, q, r);
    for (size_t i = 0; i < w.size(); ++i) kept += w[i] * c.cxy[i];
    report->energy_kept = kept / std::max(c.trace_yy, 1e-30);  // share of Y's variance explained
  }
  return code;
}

}  // namespace scd
