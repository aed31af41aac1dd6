// See reduced_rank.h.
#include "common/scd/reduced_rank.h"

#include <cblas.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/scd/linalg.h"

namespace scd {

void LinearCode::Encode(const float* x, int rows, float* z, int use_rank) const {
  const int r = use_rank < 0 ? rank : std::min(use_rank, rank);
  std::vector<float> centred(static_cast<size_t>(rows) * in_dim);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < in_dim; ++i) {
      centred[static_cast<size_t>(r) * in_dim + i] =
          x[static_cast<size_t>(r) * in_dim + i] - mu_in[i];
    }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, r, in_dim, 1.0f, centred.data(),
              in_dim, encoder.data(), rank, 0.0f, z, r);
}

void LinearCode::Decode(const float* z, int rows, float* y, int use_rank) const {
  const int r = use_rank < 0 ? rank : std::min(use_rank, rank);
  for (int i = 0; i < rows; ++i)
    std::copy(mu_out.begin(), mu_out.end(), y + static_cast<size_t>(i) * out_dim);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, out_dim, r, 1.0f, z, r,
              decoder.data(), out_dim, 1.0f, y, out_dim);
}

CrossMoments::CrossMoments(int p, int q)
    : p_(p),
      q_(q),
      sx_(p),
      sy_(q),
      sxx_(static_cast<size_t>(p) * p),
      sxy_(static_cast<size_t>(p) * q),
      syy_(static_cast<size_t>(q) * q) {}

void CrossMoments::Add(const float* x, const float* y, int rows) {
  std::vector<double> xd(x, x + static_cast<size_t>(rows) * p_);
  std::vector<double> yd(y, y + static_cast<size_t>(rows) * q_);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p_, p_, rows, 1.0, xd.data(), p_, xd.data(),
              p_, 1.0, sxx_.data(), p_);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p_, q_, rows, 1.0, xd.data(), p_, yd.data(),
              q_, 1.0, sxy_.data(), q_);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, q_, q_, rows, 1.0, yd.data(), q_, yd.data(),
              q_, 1.0, syy_.data(), q_);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < p_; ++i) sx_[i] += xd[static_cast<size_t>(r) * p_ + i];
    for (int j = 0; j < q_; ++j) sy_[j] += yd[static_cast<size_t>(r) * q_ + j];
  }
  count_ += rows;
}

absl::StatusOr<ReducedRankSolution> SolveReducedRank(const std::vector<double>& cxx,
                                                     const std::vector<double>& cxy, int p, int q,
                                                     int rank, double lambda) {
  // B = (Cxx + λI)⁻¹ Cxy; the fitted covariance is M = Bᵀ Cxx B (q × q).
  SCD_ASSIGN_OR_RETURN(std::vector<double> b, linalg::SolveSpd(cxx, cxy, p, q, lambda));
  const std::vector<double> cxx_b = linalg::MatMul(cxx, b, p, q, p);
  const std::vector<double> m = linalg::MatMul(b, cxx_b, q, q, p, /*trans_a=*/true);
  ReducedRankSolution sol;
  SCD_ASSIGN_OR_RETURN(sol.eigen, linalg::SymmetricEigen(m, q));
  sol.vr.resize(static_cast<size_t>(q) * rank);
  for (int i = 0; i < q; ++i)
    for (int j = 0; j < rank; ++j) {
      sol.vr[static_cast<size_t>(i) * rank + j] = sol.eigen.vectors[static_cast<size_t>(i) * q + j];
    }
  sol.encoder = linalg::MatMul(b, sol.vr, p, rank, q);
  return sol;
}

CrossMoments::Centred CrossMoments::Centre() const {
  const double n = static_cast<double>(count_);
  Centred c;
  c.mx.resize(p_);
  c.my.resize(q_);
  for (int i = 0; i < p_; ++i) c.mx[i] = sx_[i] / n;
  for (int j = 0; j < q_; ++j) c.my[j] = sy_[j] / n;
  // Centred moments C = S − n μ μᵀ.
  c.cxx = sxx_;
  c.cxy = sxy_;
  c.cyy = syy_;
  for (int i = 0; i < p_; ++i)
    for (int j = 0; j < p_; ++j) c.cxx[static_cast<size_t>(i) * p_ + j] -= n * c.mx[i] * c.mx[j];
  for (int i = 0; i < p_; ++i)
    for (int j = 0; j < q_; ++j) c.cxy[static_cast<size_t>(i) * q_ + j] -= n * c.mx[i] * c.my[j];
  for (int i = 0; i < q_; ++i)
    for (int j = 0; j < q_; ++j) c.cyy[static_cast<size_t>(i) * q_ + j] -= n * c.my[i] * c.my[j];
  for (int i = 0; i < p_; ++i) c.trace_xx += c.cxx[static_cast<size_t>(i) * p_ + i];
  for (int j = 0; j < q_; ++j) c.trace_yy += c.cyy[static_cast<size_t>(j) * q_ + j];
  return c;
}

double CrossMoments::RelativeError(const Centred& c, const LinearCode& code) const {
  // err = tr(Cyy) − 2 tr(Dᵀ Eᵀ Cxy) + tr(Dᵀ Eᵀ Cxx E D), with W = E D [p, q].
  const std::vector<double> e(code.encoder.begin(), code.encoder.end());
  const std::vector<double> d(code.decoder.begin(), code.decoder.end());
  const std::vector<double> w = linalg::MatMul(e, d, p_, q_, code.rank);
  const std::vector<double> cxx_w = linalg::MatMul(c.cxx, w, p_, q_, p_);
  double cross = 0, quad = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    cross += w[i] * c.cxy[i];
    quad += w[i] * cxx_w[i];
  }
  return (c.trace_yy - 2 * cross + quad) / std::max(c.trace_yy, 1e-30);
}

double CrossMoments::RawRelativeError(const Centred& c) const {
  if (p_ != q_) return -1;
  double raw = 0;
  for (int i = 0; i < p_; ++i) {
    raw += sxx_[static_cast<size_t>(i) * p_ + i] - 2 * sxy_[static_cast<size_t>(i) * q_ + i] +
           syy_[static_cast<size_t>(i) * q_ + i];
  }
  return raw / std::max(c.trace_yy, 1e-30);
}

absl::StatusOr<LinearCode> CrossMoments::Fit(int rank, double ridge, FitReport* report) const {
  if (rank <= 0 || rank > std::min(p_, q_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " must be in [1, min(", p_, ", ", q_, ")]"));
  }
  if (count_ < 2) return absl::FailedPreconditionError("calibration needs at least two states");
  const Centred c = Centre();
  const double lambda = std::max(ridge * c.trace_xx / p_, 1e-12);

  SCD_ASSIGN_OR_RETURN(ReducedRankSolution sol,
                       SolveReducedRank(c.cxx, c.cxy, p_, q_, rank, lambda));
  const linalg::Eigen& eig = sol.eigen;
  const std::vector<double>& vr = sol.vr;
  const std::vector<double>& e = sol.encoder;

  LinearCode code;
  code.in_dim = p_;
  code.out_dim = q_;
  code.rank = rank;
  code.mu_in.assign(c.mx.begin(), c.mx.end());
  code.mu_out.assign(c.my.begin(), c.my.end());
  code.encoder.assign(e.begin(), e.end());
  code.decoder.resize(static_cast<size_t>(rank) * q_);
  for (int j = 0; j < rank; ++j)
    for (int i = 0; i < q_; ++i)
      code.decoder[static_cast<size_t>(j) * q_ + i] =
          static_cast<float>(vr[static_cast<size_t>(i) * rank + j]);

  if (report != nullptr) {
    report->relative_error = RelativeError(c, code);
    double kept = 0, total = 0;
    for (int j = 0; j < q_; ++j) {
      total += std::max(eig.values[j], 0.0);
      if (j < rank) kept += std::max(eig.values[j], 0.0);
    }
    report->energy_kept = total > 0 ? kept / total : 1.0;
    report->raw_relative_error = RawRelativeError(c);
  }
  return code;
}

}  // namespace scd
