// IEEE binary16 ("F16") and bfloat16 ("BF16") conversions to and from F32. Checkpoints store
// weights in either; we compute in F32. Widening is exact for every input (NaN payloads and
// signed zeros kept); narrowing rounds to nearest, ties to even, and overflows to ±inf, as
// PyTorch's `.half()` and `.bfloat16()` do. The array forms are branch-free so that the
// compiler vectorises them, and read their input with memcpy: tensors in a mapped
// safetensors file need not be aligned.
#ifndef SCD_COMMON_BASE_FLOAT16_H_
#define SCD_COMMON_BASE_FLOAT16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace scd {

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// binary16 → binary32. Normals rebias the exponent (15 → 127); subnormals are
// mantissa · 2⁻²⁴, exact in F32; inf and NaN keep their payload.
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t magnitude = h & 0x7fffu;
  const uint32_t normal = (magnitude << 13) + 0x38000000u;
  const uint32_t inf_nan = (magnitude << 13) | 0x7f800000u;
  const uint32_t subnormal =
      FloatToBits(static_cast<float>(static_cast<int32_t>(magnitude)) * 5.9604644775390625e-8f);
  const uint32_t is_inf_nan = 0u - static_cast<uint32_t>(magnitude >= 0x7c00u);
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(magnitude < 0x0400u);
  const uint32_t bits =
      (inf_nan & is_inf_nan) | (subnormal & is_subnormal) | (normal & ~(is_inf_nan | is_subnormal));
  return BitsToFloat(bits | sign);
}

inline float Bfloat16ToFloat(uint16_t b) { return BitsToFloat(uint32_t{b} << 16); }

// binary32 → binary16, round to nearest even.
uint16_t FloatToHalf(float f);
// binary32 → bfloat16, round to nearest even; NaN stays a (quiet) NaN.
uint16_t FloatToBfloat16(float f);

// dst[i] = widen(src[i]) for n little-endian 16-bit values at `src` (any alignment).
void HalfToFloat(const void* src, float* dst, size_t n);
void Bfloat16ToFloat(const void* src, float* dst, size_t n);
// dst (any alignment) receives n 16-bit values.
void FloatToHalf(const float* src, void* dst, size_t n);
void FloatToBfloat16(const float* src, void* dst, size_t n);

}  // namespace scd

#endif  // SCD_COMMON_BASE_FLOAT16_H_
