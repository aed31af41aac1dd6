// LowRankBasis: the CPU tier's compressed form of one span's keys or values for one KV head
// (SeKV "two resolutions per span", CPU side). X [n, d] is factored by a truncated SVD,
// X ≈ (U_r Σ_r) V_rᵀ, keeping the smallest rank r whose singular values hold a share
// `energy` of the spectral energy Σσ², capped at r_max:
//   r = min{ r : Σ_{i<r} σ_i² >= energy · Σ_i σ_i² },  r <= r_max.
// So the rank follows the span's information density: a span of near-identical tokens needs
// rank 1, a span of unrelated tokens needs up to min(n, d).
//
// The SVD comes from the eigendecomposition of the smaller Gram matrix (X Xᵀ when n <= d,
// else Xᵀ X) by cyclic Jacobi rotations in double precision: spans are short (tens of
// tokens), so this is exact to float precision and needs no LAPACK workspace.
#ifndef SCD_COMMON_SEKV_LOW_RANK_H_
#define SCD_COMMON_SEKV_LOW_RANK_H_

#include <cstddef>
#include <vector>

namespace scd::sekv {

struct LowRankBasis {
  int rows = 0;            // n (tokens)
  int cols = 0;            // d (head_dim)
  int rank = 0;            // r
  std::vector<float> us;   // [n, r] = U_r Σ_r
  std::vector<float> vt;   // [r, d] = V_rᵀ
  double energy_kept = 0;  // Σ_{i<r} σ_i² / Σ σ_i² (1 for an all-zero X)

  size_t bytes() const { return (us.size() + vt.size()) * sizeof(float); }
  // out[n, d] (row stride `out_stride`) = us · vt.
  void Reconstruct(float* out, int out_stride) const;
  // out[d] = row i of us · vt (one token, for token-resolution zoom-in).
  void ReconstructRow(int i, float* out) const;
};

// Eigendecomposition of a symmetric matrix a [n, n] (row-major, double): eigenvalues in
// descending order, eigenvectors as columns of `vectors` [n, n].
void SymmetricEigenJacobi(std::vector<double> a, int n, std::vector<double>* values,
                          std::vector<double>* vectors);

// Truncated SVD of x [n, d] read with row stride `stride`.
LowRankBasis TruncatedSvd(const float* x, int n, int d, int stride, double energy, int r_max);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_LOW_RANK_H_
