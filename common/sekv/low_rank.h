// LowRankBasis: the CPU tier's compressed form of one span's keys or values for one KV head
// (SeKV "two resolutions per span", CPU side). X [n, d] is factored by a truncated SVD,
// X ≈ (U_r Σ_r) V_rᵀ, keeping the smallest rank r whose singular values hold a share
// `energy` of the spectral energy Σσ², capped at r_max:
//   r = min{ r : Σ_{i<r} σ_i² >= energy · Σ_i σ_i² },  r <= r_max.
// So the rank follows the span's information density: a span of near-identical tokens needs
// rank 1, a span of unrelated tokens needs up to min(n, d).
//
// The SVD comes from the eigendecomposition of the smaller Gram matrix (X Xᵀ when n <= d,
// else Xᵀ X) in double precision: cyclic Jacobi rotations up to kJacobiMaxOrder, and above it
// Householder reduction to tridiagonal form followed by implicit QL iterations, which cost
// about 9n³ where Jacobi's ~10 sweeps cost several times that: over the spans of a 32K-token
// layer of a 7B shape, 2.9x less time (scd-sekv-bench measures both side by side). Both are
// exact to far below float precision on these Gram matrices. LAPACK is not used: OpenBLAS's
// build threads each call, which is slower at these sizes and when the layers' stores are
// built in parallel. A SEKV layer at 32K tokens takes tens of thousands of these small SVDs,
// so TruncatedSvd keeps its working memory per thread, and its loops (the Gram matrix, the
// reduction, the rotations, the projections) run their innermost loop over contiguous memory
// and independent sums, which the compiler vectorises; the eigenvector matrices are held
// column-major inside for that.
//
// Where the factors live: a SpanStore layer holds tens of thousands of bases, so it hands
// TruncatedSvd a BasisArena, one reservation for the whole layer (huge pages when large), and
// the bases point into it; a basis built without one owns its floats. Two small allocations
// per basis used to cost a page fault per 4 KB when built, and 20 ms per layer to free at 32K
// tokens (86 ms at 128K), where the arena takes a few.
#ifndef SCD_COMMON_SEKV_LOW_RANK_H_
#define SCD_COMMON_SEKV_LOW_RANK_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "common/base/huge_pages.h"

namespace scd::sekv {

// Storage for bases: floats handed out in order from blocks that are never moved or freed
// before the arena, each in pages of its own (NewFloatsWithHugePages). Move-only.
class BasisArena {
 public:
  BasisArena() = default;
  BasisArena(BasisArena&&) = default;
  BasisArena& operator=(BasisArena&&) = default;

  // Makes the next `floats` floats of allocations come from one block (left untouched, so
  // only what is handed out and written is ever faulted in).
  void Reserve(size_t floats);
  // n floats, uninitialised.
  float* Allocate(size_t n);
  size_t allocated() const { return allocated_; }  // floats handed out

  // The part of a block handed out: `floats` floats from `data`, which starts the block (so
  // it is page-aligned, and the block's pages from it are its own).
  struct Block {
    const float* data;
    size_t floats;
  };
  // Every block that has handed out floats, in order: what a device maps to read the bases
  // in place.
  std::vector<Block> blocks() const;

 private:
  static constexpr size_t kBlockFloats = size_t{1} << 20;  // 4 MB, when nothing is reserved
  struct Owned {
    HugeFloats data;
    size_t used, capacity;
  };
  std::vector<Owned> blocks_;
  size_t allocated_ = 0;
};

struct LowRankBasis {
  int rows = 0;               // n (tokens)
  int cols = 0;               // d (head_dim)
  int rank = 0;               // r
  const float* us = nullptr;  // [n, r] = U_r Σ_r
  const float* vt = nullptr;  // [r, d] = V_rᵀ
  double energy_kept = 0;     // Σ_{i<r} σ_i² / Σ σ_i² (1 for an all-zero X)
  // The floats of a basis built without an arena (shared by its copies); else null, and the
  // arena holds them.
  std::shared_ptr<const float[]> owned;

  size_t us_size() const { return static_cast<size_t>(rows) * rank; }
  size_t vt_size() const { return static_cast<size_t>(rank) * cols; }
  size_t bytes() const { return (us_size() + vt_size()) * sizeof(float); }
  // out[n, d] (row stride `out_stride`) = us · vt.
  void Reconstruct(float* out, int out_stride) const;
  // out[d] = row i of us · vt (one token, for token-resolution zoom-in).
  void ReconstructRow(int i, float* out) const;
};

// Eigendecomposition of a symmetric matrix a [n, n] (row-major, double): eigenvalues in
// descending order, eigenvectors as columns of `vectors` [n, n].
void SymmetricEigenJacobi(std::vector<double> a, int n, std::vector<double>* values,
                          std::vector<double>* vectors);

// The same contract: Jacobi for n <= kJacobiMaxOrder, tridiagonal QL above (Jacobi again in
// the unlikely case that QL does not converge). Eigenvectors are determined up to sign.
inline constexpr int kJacobiMaxOrder = 8;
void SymmetricEigen(std::vector<double> a, int n, std::vector<double>* values,
                    std::vector<double>* vectors);

// The Gram matrix TruncatedSvd decomposes: X Xᵀ [n, n] when n <= d, else Xᵀ X [d, d], in
// double, for x [n, d] read with row stride `stride`.
std::vector<double> SmallerGram(const float* x, int n, int d, int stride);

// Truncated SVD of x [n, d] read with row stride `stride`; its factors in `arena`, which must
// outlive the basis, or, when null, in storage the basis owns.
LowRankBasis TruncatedSvd(const float* x, int n, int d, int stride, double energy, int r_max,
                          BasisArena* arena = nullptr);
// The most floats TruncatedSvd takes for an [n, d] block at rank cap r_max: its arena
// reservation.
size_t MaxBasisFloats(int n, int d, int r_max);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_LOW_RANK_H_
