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
      centred[static_cast<size_t>(r) * in_dim + i] = x[static_cast<size_t>(r) * in_dim + i] - mu_in[i];
    }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, r, in_dim, 1.0f,
              centred.data(), in_dim, encoder.data(), rank, 0.0f, z, r);
}

void LinearCode::Decode(const float* z, int rows, float* y, int use_rank) const {
  const int r = use_rank < 0 ? rank : std::min(use_rank, rank);
  for (int i = 0; i < rows; ++i) std::copy(mu_out.begin(), mu_out.end(), y + static_cast<size_t>(i) * out_dim);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, out_dim, r, 1.0f, z, r,
              decoder.data(), out_dim, 1.0f, y, out_dim);
}

CrossMoments::CrossMoments(int p, int q)
    : p_(p), q_(q), sx_(p), sy_(q), sxx_(static_cast<size_t>(p) * p),
      sxy_(static_cast<size_t>(p) * q), syy_(static_cast<size_t>(q) * q) {}

void CrossMoments::Add(const float* x, const float* y, int rows) {
  std::vector<double> xd(x, x + static_cast<size_t>(rows) * p_);
  std::vector<double> yd(y, y + static_cast<size_t>(rows) * q_);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p_, p_, rows, 1.0, xd.data(), p_,
              xd.data(), p_, 1.0, sxx_.data(), p_);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, p_, q_, rows, 1.0, xd.data(), p_,
              yd.data(), q_, 1.0, sxy_.data(), q_);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, q_, q_, rows, 1.0, yd.data(), q_,
              yd.data(), q_, 1.0, syy_.data(), q_);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < p_; ++i) sx_[i] += xd[static_cast<size_t>(r) * p_ + i];
    for (int j = 0; j < q_; ++j) sy_[j] += yd[static_cast<size_t>(r) * q_ + j];
  }
  count_ += rows;
}

absl::StatusOr<LinearCode> CrossMoments::Fit(int rank, double ridge, FitReport* report) const {
  if (rank <= 0 || rank > std::min(p_, q_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " must be in [1, min(", p_, ", ", q_, ")]"));
  }
  if (count_ < 2) return absl::FailedPreconditionError("calibration needs at least two states");
  const double n = static_cast<double>(count_);
  std::vector<double> mx(p_), my(q_);
  for (int i = 0; i < p_; ++i) mx[i] = sx_[i] / n;
  for (int j = 0; j < q_; ++j) my[j] = sy_[j] / n;
  // Centred moments C = S − n μ μᵀ.
  std::vector<double> cxx(sxx_), cxy(sxy_), cyy(syy_);
  for (int i = 0; i < p_; ++i)
    for (int j = 0; j < p_; ++j) cxx[static_cast<size_t>(i) * p_ + j] -= n * mx[i] * mx[j];
  for (int i = 0; i < p_; ++i)
    for (int j = 0; j < q_; ++j) cxy[static_cast<size_t>(i) * q_ + j] -= n * mx[i] * my[j];
  for (int i = 0; i < q_; ++i)
    for (int j = 0; j < q_; ++j) cyy[static_cast<size_t>(i) * q_ + j] -= n * my[i] * my[j];
  double trace_xx = 0, trace_yy = 0;
  for (int i = 0; i < p_; ++i) trace_xx += cxx[static_cast<size_t>(i) * p_ + i];
  for (int j = 0; j < q_; ++j) trace_yy += cyy[static_cast<size_t>(j) * q_ + j];
  const double lambda = std::max(ridge * trace_xx / p_, 1e-12);

  // B = (Cxx + λI)⁻¹ Cxy; the fitted covariance is M = Bᵀ Cxx B (q × q).
  SCD_ASSIGN_OR_RETURN(std::vector<double> b, linalg::SolveSpd(cxx, cxy, p_, q_, lambda));
  const std::vector<double> cxx_b = linalg::MatMul(cxx, b, p_, q_, p_);
  const std::vector<double> m = linalg::MatMul(b, cxx_b, q_, q_, p_, /*trans_a=*/true);
  SCD_ASSIGN_OR_RETURN(linalg::Eigen eig, linalg::SymmetricEigen(m, q_));

  LinearCode code;
  code.in_dim = p_;
  code.out_dim = q_;
  code.rank = rank;
  code.mu_in.assign(mx.begin(), mx.end());
  code.mu_out.assign(my.begin(), my.end());
  std::vector<double> vr(static_cast<size_t>(q_) * rank);  // [q, r]
  for (int i = 0; i < q_; ++i)
    for (int j = 0; j < rank; ++j) vr[static_cast<size_t>(i) * rank + j] = eig.vectors[static_cast<size_t>(i) * q_ + j];
  const std::vector<double> e = linalg::MatMul(b, vr, p_, rank, q_);  // [p, r]
  code.encoder.assign(e.begin(), e.end());
  code.decoder.resize(static_cast<size_t>(rank) * q_);
  for (int j = 0; j < rank; ++j)
    for (int i = 0; i < q_; ++i) code.decoder[static_cast<size_t>(j) * q_ + i] = static_cast<float>(vr[static_cast<size_t>(i) * rank + j]);

  if (report != nullptr) {
    // err = tr(Cyy) − 2 tr(Dᵀ Eᵀ Cxy) + tr(Dᵀ Eᵀ Cxx E D), with W = E D [p, q].
    std::vector<double> d(code.decoder.begin(), code.decoder.end());
    const std::vector<double> w = linalg::MatMul(e, d, p_, q_, rank);
    const std::vector<double> cxx_w = linalg::MatMul(cxx, w, p_, q_, p_);
    double cross = 0, quad = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      cross += w[i] * cxy[i];
      quad += w[i] * cxx_w[i];
    }
    report->relative_error = (trace_yy - 2 * cross + quad) / std::max(trace_yy, 1e-30);
    double kept = 0, total = 0;
    for (int j = 0; j < q_; ++j) {
      total += std::max(eig.values[j], 0.0);
      if (j < rank) kept += std::max(eig.values[j], 0.0);
    }
    report->energy_kept = total > 0 ? kept / total : 1.0;
    report->raw_relative_error = -1;
    if (p_ == q_) {
      double raw = 0;
      for (int i = 0; i < p_; ++i) {
        raw += sxx_[static_cast<size_t>(i) * p_ + i] - 2 * sxy_[static_cast<size_t>(i) * q_ + i] +
               syy_[static_cast<size_t>(i) * q_ + i];
      }
      report->raw_relative_error = raw / std::max(trace_yy, 1e-30);
    }
  }
  return code;
}

}  // namespace scd
