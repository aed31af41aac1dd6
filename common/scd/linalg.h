// Small dense linear algebra for calibration, in double precision on row-major matrices:
// ridge solves and symmetric eigendecompositions through the LAPACK that ships inside
// OpenBLAS (dposv, dsyev). Calibration matrices are at most model-width square, so clarity
// beats blocking here.
#ifndef SCD_COMMON_SCD_LINALG_H_
#define SCD_COMMON_SCD_LINALG_H_

#include <vector>

#include "absl/status/statusor.h"

namespace scd::linalg {

// C[m, n] = A[m, k] · B[k, n] (optionally Aᵀ when trans_a, with A stored [k, m]).
std::vector<double> MatMul(const std::vector<double>& a, const std::vector<double>& b, int m, int n,
                           int k, bool trans_a = false);

// Solves (A + ridge·I) X = B for symmetric positive-definite A [n, n], B [n, m].
absl::StatusOr<std::vector<double>> SolveSpd(std::vector<double> a, const std::vector<double>& b,
                                             int n, int m, double ridge);

struct Eigen {
  std::vector<double> values;   // [n], descending
  std::vector<double> vectors;  // [n, n] row-major; column j is the eigenvector of values[j]
};
// Eigendecomposition of a symmetric matrix A [n, n].
absl::StatusOr<Eigen> SymmetricEigen(const std::vector<double>& a, int n);

}  // namespace scd::linalg

#endif  // SCD_COMMON_SCD_LINALG_H_
