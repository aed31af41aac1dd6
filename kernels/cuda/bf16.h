// Bf16: storage-only bfloat16 (the upper 16 bits of an IEEE float32), bit-compatible with
// CUDA's __nv_bfloat16 so that host code can hold device BF16 arrays without CUDA headers.
// Host conversion rounds to nearest, ties to even, exactly like __float2bfloat16_rn, so a
// host-rounded copy of an input is the exact value a kernel sees (the parity tests rely on it).
#ifndef SCD_KERNELS_CUDA_BF16_H_
#define SCD_KERNELS_CUDA_BF16_H_

#include <cstdint>
#include <cstring>

namespace scd::cuda {

struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2, "Bf16 must be 2 bytes");

inline Bf16 FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return Bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};  // quiet NaN stays NaN
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return Bf16{static_cast<uint16_t>(u >> 16)};
}

inline float Bf16ToFloat(Bf16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// The float a value becomes after a round trip through BF16.
inline float RoundToBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_BF16_H_
