// The GPU emulator's WMMA (<mma.h>), for the 16x16x16 shapes the kernels use: every lane's
// fragment holds the whole tile, so element order inside a fragment (unspecified in CUDA) does
// not matter. Each *_sync call first waits for every lane of the warp, as CUDA documents, and
// checks what CUDA requires of its pointer (256-bit aligned) and leading dimension (a multiple
// of 16 bytes). A store is done once per warp, by the lane that arrives last: the tile is in
// memory for every lane after the warp's next barrier, not before. BF16 products accumulate in
// float, as the tensor cores do (in another order, within the tests' tolerances).
#ifndef SCD_TESTS_GPU_EMU_MMA_H_
#define SCD_TESTS_GPU_EMU_MMA_H_

#include <cstdint>

#include "scd_emu/device.h"

namespace scd_emu {

// Waits for the warp (as __syncwarp); true in the lane that arrived last.
bool WarpArriveIsLast();

inline void RequireTile(const void* p, unsigned ldm, size_t element_bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) Fail(what);
  if ((ldm * element_bytes) % 16 != 0) Fail(what);
}

}  // namespace scd_emu

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator models 16x16x16 WMMA only");
  static constexpr int kRows = 16, kCols = 16;
  T x[kRows * kCols];  // row-major tile
};

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T value) {
  for (T& e : f.x) e = value;
}

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  scd_emu::WarpArriveIsLast();
  scd_emu::RequireTile(p, ldm, sizeof(T), "wmma::load_matrix_sync: misaligned pointer or ldm");
  constexpr bool kColMajor = std::is_same<Layout, col_major>::value;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = kColMajor ? p[c * ldm + r] : p[r * ldm + c];
  }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  scd_emu::WarpArriveIsLast();
  scd_emu::RequireTile(p, ldm, sizeof(float), "wmma::load_matrix_sync: misaligned pointer or ldm");
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.x[r * 16 + c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
    }
  }
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  const bool last = scd_emu::WarpArriveIsLast();
  scd_emu::RequireTile(p, ldm, sizeof(float), "wmma::store_matrix_sync: misaligned pointer or ldm");
  if (!last) return;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * 16 + c];
    }
  }
}

template <typename TA, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, TA, LA>& a,
              const fragment<matrix_b, 16, 16, 16, TA, LB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  scd_emu::WarpArriveIsLast();
  float out[256];
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float sum = c.x[i * 16 + j];
      for (int k = 0; k < 16; ++k) {
        sum += __bfloat162float(a.x[i * 16 + k]) * __bfloat162float(b.x[k * 16 + j]);
      }
      out[i * 16 + j] = sum;
    }
  }
  for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma

#endif  // SCD_TESTS_GPU_EMU_MMA_H_
