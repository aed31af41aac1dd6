// See linalg.h. LAPACK is column-major; for symmetric inputs row- and column-major agree,
// and right-hand sides are transposed on the way in and out.
#include "common/scd/linalg.h"

#include <cblas.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

extern "C" {
void dposv_(const char* uplo, const int* n, const int* nrhs, double* a, const int* lda, double* b,
            const int* ldb, int* info);
void dsyev_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
            double* work, const int* lwork, int* info);
}

namespace scd::linalg {

std::vector<double> MatMul(const std::vector<double>& a, const std::vector<double>& b, int m, int n,
                           int k, bool trans_a) {
  std::vector<double> c(static_cast<size_t>(m) * n);
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, m, n, k, 1.0,
              a.data(), trans_a ? m : k, b.data(), n, 0.0, c.data(), n);
  return c;
}

absl::StatusOr<std::vector<double>> SolveSpd(std::vector<double> a, const std::vector<double>& b,
                                             int n, int m, double ridge) {
  for (int i = 0; i < n; ++i) a[static_cast<size_t>(i) * n + i] += ridge;
  std::vector<double> x(static_cast<size_t>(n) * m);  // column-major [n, m]
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      x[static_cast<size_t>(j) * n + i] = b[static_cast<size_t>(i) * m + j];
  int info = 0;
  const char uplo = 'U';
  dposv_(&uplo, &n, &m, a.data(), &n, x.data(), &n, &info);
  if (info != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("ridge solve failed (LAPACK dposv info=", info,
                     "): the calibration states are degenerate; add data or raise the ridge"));
  }
  std::vector<double> out(static_cast<size_t>(n) * m);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      out[static_cast<size_t>(i) * m + j] = x[static_cast<size_t>(j) * n + i];
  return out;
}

absl::StatusOr<Eigen> SymmetricEigen(const std::vector<double>& a, int n) {
  std::vector<double> work_a = a;  // column-major == row-major for symmetric A
  std::vector<double> w(n);
  int info = 0, lwork = -1;
  const char jobz = 'V', uplo = 'U';
  double query = 0;
  dsyev_(&jobz, &uplo, &n, work_a.data(), &n, w.data(), &query, &lwork, &info);
  lwork = std::max(1, static_cast<int>(query));
  std::vector<double> work(lwork);
  dsyev_(&jobz, &uplo, &n, work_a.data(), &n, w.data(), work.data(), &lwork, &info);
  if (info != 0) {
    return absl::InternalError(
        absl::StrCat("eigendecomposition failed (LAPACK dsyev info=", info, ")"));
  }
  // dsyev returns ascending values with eigenvectors in the columns of the column-major
  // result, i.e. in row j of work_a as stored. Reorder to descending, columns in row-major.
  Eigen e;
  e.values.resize(n);
  e.vectors.resize(static_cast<size_t>(n) * n);
  for (int j = 0; j < n; ++j) {
    const int src = n - 1 - j;
    e.values[j] = w[src];
    for (int i = 0; i < n; ++i) {
      e.vectors[static_cast<size_t>(i) * n + j] = work_a[static_cast<size_t>(src) * n + i];
    }
  }
  return e;
}

}  // namespace scd::linalg
