// See float16.h. Narrowing follows the classic bit-level recipe (as in Fabian Giesen's
// float_to_half_fast3_rtne): normals add the rounding bias (0xfff plus the kept mantissa's
// lowest bit, which breaks ties to even) and let the carry run into the exponent; values
// below 2⁻¹⁴ are rounded by the FPU itself by adding 0.5f, whose ulp (2⁻²⁴) is exactly the
// binary16 subnormal step.
#include "common/base/float16.h"

namespace scd {

uint16_t FloatToHalf(float f) {
  uint32_t x = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) {  // inf or NaN; a NaN keeps its top payload bits and stays quiet
    const uint16_t nan_bits = x > 0x7f800000u ? (0x0200u | ((x >> 13) & 0x03ffu)) : 0u;
    return static_cast<uint16_t>(sign | 0x7c00u | nan_bits);
  }
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // ≥ 65520 → inf
  if (x < 0x38800000u) {  // below 2⁻¹⁴: subnormal or zero in binary16
    const float rounded = BitsToFloat(x) + 0.5f;
    return static_cast<uint16_t>(sign | (FloatToBits(rounded) - FloatToBits(0.5f)));
  }
  const uint32_t odd = (x >> 13) & 1u;
  x += ((15u - 127u) << 23) + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (x >> 13));
}

uint16_t FloatToBfloat16(float f) {
  const uint32_t x = FloatToBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t odd = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + odd) >> 16);
}

void HalfToFloat(const void* src, float* dst, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, sizeof(h));
    dst[i] = HalfToFloat(h);
  }
}

void Bfloat16ToFloat(const void* src, float* dst, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, p + 2 * i, sizeof(b));
    dst[i] = Bfloat16ToFloat(b);
  }
}

void FloatToHalf(const float* src, void* dst, size_t n) {
  unsigned char* p = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToHalf(src[i]);
    std::memcpy(p + 2 * i, &h, sizeof(h));
  }
}

void FloatToBfloat16(const float* src, void* dst, size_t n) {
  unsigned char* p = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) {
    const uint16_t b = FloatToBfloat16(src[i]);
    std::memcpy(p + 2 * i, &b, sizeof(b));
  }
}

}  // namespace scd
