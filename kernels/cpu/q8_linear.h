// Q8Linear: y = x · Wᵀ with W held as int8 in blocks of 32 weights along a row, one scale per
// block (llama.cpp's Q8_0 format, in the layout Q8Matrix describes).
//
// A decode step reads every weight once and does little work per byte, so its time is the
// time to read the weights. Q8_0 holds a weight in 1 + 2/32 bytes instead of 4: 3.76x fewer
// bytes. Per block b of row j, with s_b = max|w| / 127 and q = round(w / s_b):
//   w ≈ s_b · q,   |w − s_b · q| <= s_b / 2.
// The scale is an IEEE half, rounded up from max|w| / 127 so that |q| <= 127 still holds.
// A half costs 1/16 byte per weight where a float would cost 1/8 (3.56x fewer bytes than F32
// instead of 3.76x), and it converts to float exactly (F16C on x86, a few integer operations
// elsewhere), so both kernel variants see the same scale. Its 11 significant bits cost no
// accuracy that matters: the quants themselves hold 8. The limit is range: blocks with
// max|w| above 127 · 65504 ≈ 8.3e6 saturate (no trained weight comes near it).
//
// Decode rows (m <= kQ8DecodeMaxRows) are themselves quantized per block of 32, x ≈ t_b · p,
// and each block's product is an exact integer sum, scaled in float:
//   y[r, j] = Σ_b (s_b · t_b) · Σ_{i in b} q_i · p_i
// Each row's 8 lanes of 4-product integer sums are accumulated in float with one FMA per
// block, then the lanes are added in a fixed tree: the scalar and the AVX2 variants do the
// same float operations in the same order, so they agree bit for bit, and a row's result
// depends only on x[r] and W (never on the other rows, the thread count or the ISA choice).
// Prefill rows (m > kQ8DecodeMaxRows) go through OpenBLAS's sgemm against W dequantized a
// chunk of rows at a time: they see F32 activations against the dequantized weights, while
// decode rows see int8 activations. The two paths differ by the activations' rounding
// (relative ~1/254 per block, averaging out over a row's many blocks).
#ifndef SCD_KERNELS_CPU_Q8_LINEAR_H_
#define SCD_KERNELS_CPU_Q8_LINEAR_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "common/base/huge_pages.h"

namespace scd::cpu {

constexpr int kQ8Block = 32;          // weights per block (and per scale)
constexpr int kQ8DecodeMaxRows = 16;  // up to this many input rows take the int8 kernel
constexpr int kQ8MaxProducts = 8;     // matrices one Q8LinearMany call runs as one job

// A fixed-size array of T on 64-byte (cache line) boundaries, for aligned vector loads.
// Move-only; zeroed, up to the next 64 bytes past size(). With `huge_pages`, an array of at
// least kHugePageBytes comes from MapHugePages (common/base/huge_pages.h): a stream of weights
// then misses the TLB once per 2 MB instead of once per 4 KB page, which under a hypervisor is
// a two-level page walk each time.
template <typename T>
class AlignedArray {
 public:
  AlignedArray() = default;
  explicit AlignedArray(size_t size, bool huge_pages = false) : size_(size) {
    const size_t bytes = (size * sizeof(T) + 63) / 64 * 64;
    if (bytes == 0) return;
    if (huge_pages && bytes >= kHugePageBytes) {
      if (void* p = MapHugePages(bytes)) {
        data_ = std::unique_ptr<T, Free>(static_cast<T*>(p), Free{bytes});
        return;
      }
    }
    data_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (!data_) throw std::bad_alloc();
    // Zeroed as bytes: T is a plain number type.
    std::memset(static_cast<void*>(data_.get()), 0, bytes);
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    size_t mapped_bytes = 0;  // from MapHugePages, or 0 from aligned_alloc
    void operator()(T* p) const {
      if (mapped_bytes > 0) {
        UnmapHugePages(p, mapped_bytes);
      } else {
        std::free(p);
      }
    }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

// The weights in the order the decode kernel reads them, so that it streams one long run of
// memory per group of kQ8Group rows (many short streams, a row and a scales array each, starve
// the hardware prefetcher). Rows are padded with zero rows (scale 0) to a whole group. A group
// holds its blocks in spans of kQ8Span: the span's scales, [row of the group][block of the
// span] as halves, in one 64-byte line (zero past the row's last block), then per block the
// group's 32-byte quant blocks back to back (row 0's, row 1's, ...). Only the last span of a
// group may be short; its line is padded, its quants are not.
constexpr int kQ8Group = 4;  // W rows per group
constexpr int kQ8Span = 8;   // blocks per span: kQ8Group · kQ8Span halves fill one line
constexpr size_t kQ8SpanScaleBytes = 64;

struct Q8Matrix {
  int rows = 0;
  int cols = 0;
  int blocks = 0;          // blocks per row: ceil(cols / kQ8Block)
  size_t group_bytes = 0;  // one group of kQ8Group rows, scales included
  // The bytes, [ceil(rows / kQ8Group) groups] of group_bytes, at `data` (64-byte aligned)
  // inside `store`, which the matrix keeps alive and may share with other matrices.
  std::shared_ptr<AlignedArray<int8_t>> store;
  int8_t* data = nullptr;
  size_t size = 0;

  // Byte offsets into data: span s of group g (its scales line, then its blocks' quants), the
  // 32 quants of block b of row r (the last block's tail past cols is 0), and the IEEE half
  // bits of that block's scale.
  size_t span_offset(int g, int s) const {
    return static_cast<size_t>(g) * group_bytes +
           static_cast<size_t>(s) * (kQ8SpanScaleBytes + kQ8Span * kQ8Group * kQ8Block);
  }
  size_t quants_offset(int r, int b) const {
    return span_offset(r / kQ8Group, b / kQ8Span) + kQ8SpanScaleBytes +
           static_cast<size_t>((b % kQ8Span) * kQ8Group + r % kQ8Group) * kQ8Block;
  }
  size_t scale_offset(int r, int b) const {
    return span_offset(r / kQ8Group, b / kQ8Span) +
           sizeof(uint16_t) * ((r % kQ8Group) * kQ8Span + b % kQ8Span);
  }
  const int8_t* span(int g, int s) const { return data + span_offset(g, s); }
  const int8_t* block_quants(int r, int b) const { return data + quants_offset(r, b); }
  uint16_t block_scale(int r, int b) const {
    uint16_t h;
    std::memcpy(&h, data + scale_offset(r, b), sizeof(h));
    return h;
  }
  // Bytes held (what a product reads), padding rows and scale lines included.
  size_t bytes() const { return size; }
};

// The bytes a Q8Matrix of W[rows, cols] holds: a multiple of 64.
size_t Q8MatrixBytes(int rows, int cols);

// W[rows, cols] (row-major F32, finite) to Q8. Rows are quantized on ComputePool::Global()
// for large matrices; the result does not depend on the thread count. The first form takes
// a store of its own; the second writes into `store` at byte `offset` (a multiple of 64, with
// Q8MatrixBytes(rows, cols) zeroed bytes there), so that many matrices share one allocation.
Q8Matrix QuantizeQ8(const float* w, int rows, int cols);
Q8Matrix QuantizeQ8(const float* w, int rows, int cols, std::shared_ptr<AlignedArray<int8_t>> store,
                    size_t offset);

// out[rows, m.cols] = the dequantized rows [row0, row0 + rows) of m (s_b · q, in float).
void DequantizeQ8Rows(const Q8Matrix& m, int row0, int rows, float* out);

// y[m, w.rows] = x[m, w.cols] · Wᵀ (+ bias[w.rows] when non-null), on ComputePool::Global()
// with at most `max_threads` threads (0: the pool's; small matrices run on the caller alone).
// Takes the scalar variant when ActiveIsa() == kScalar, the AVX2 one otherwise (AVX-512
// hosts included). Safe to call from several threads at once.
void Q8Linear(const float* x, const Q8Matrix& w, const float* bias, float* y, int m,
              int max_threads = 0);

// One product of Q8LinearMany: y = x · Wᵀ (+ bias when non-null), shaped as Q8Linear's.
struct Q8Product {
  const Q8Matrix* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
};

// Q8Linear of the same x [m, cols] against `count` matrices of `cols` columns (a layer's Q, K
// and V, or its gate and up), each product the bits Q8Linear gives it. Decode rows are
// quantized once and every matrix's tasks go to the pool as one job: one dispatch, and no
// thread waiting at the end of one matrix while the other finishes it. Other calls (prefill
// rows, different column counts, more than kQ8MaxProducts) run Q8Linear per product.
void Q8LinearMany(const float* x, const Q8Product* products, int count, int m);

// IEEE half <-> float: exact one way; rounded toward +infinity the other, saturating at the
// largest finite half (for a positive, finite f). Exposed for tests.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalfUp(float f);

}  // namespace scd::cpu

#endif  // SCD_KERNELS_CPU_Q8_LINEAR_H_
