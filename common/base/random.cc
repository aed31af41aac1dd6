// See random.h. Box–Muller: with u1 ∈ (0, 1), u2 ∈ [0, 1) from one 64-bit draw,
//   r = sqrt(-2 ln u1),  z0 = r cos(2π u2),  z1 = r sin(2π u2)
// are independent N(0, 1). ln is Cephes logf (mantissa reduced to [√½, √2)); sin/cos are the
// Cephes minimax polynomials on [-π/4, π/4] after an exact quadrant reduction of u2 (it has 24
// bits, so u2 - q/4 is exact); sqrt is x·rsqrt(x) with three Newton steps. Every step is
// branch-free so that the pair loop vectorises; libm calls would not (errno).
#include "common/base/random.h"

#include "common/base/float16.h"

namespace scd {
namespace {

inline float FastLog(float x) {  // x > 0, normal
  const uint32_t bits = FloatToBits(x);
  const uint32_t mantissa = (bits & 0x007fffffu) | 0x3f800000u;  // m ∈ [1, 2)
  const uint32_t big = mantissa > 0x3fb504f3u ? 1u : 0u;         // m > √2: halve m
  const float m = BitsToFloat(mantissa - (big << 23));
  const int32_t e = static_cast<int32_t>(bits >> 23) - 127 + static_cast<int32_t>(big);
  const float f = m - 1.0f;
  const float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  const float ef = static_cast<float>(e);
  y += -2.12194440e-4f * ef;
  y += -0.5f * z;
  return f + y + 0.693359375f * ef;
}

inline float FastSqrt(float x) {  // x > 0, normal
  float y = BitsToFloat(0x5f3759dfu - (FloatToBits(x) >> 1));
  const float half = 0.5f * x;
  y = y * (1.5f - half * y * y);
  y = y * (1.5f - half * y * y);
  y = y * (1.5f - half * y * y);
  return x * y;
}

// One Box–Muller pair from the 64-bit draw `bits`.
inline void NormalPair(uint64_t bits, float* z0, float* z1) {
  const float u1 =
      (static_cast<float>(static_cast<int32_t>(bits >> 40)) + 0.5f) * 5.9604644775390625e-8f;
  const uint32_t u2_int = static_cast<uint32_t>(bits >> 16) & 0xffffffu;
  const float u2 = static_cast<float>(static_cast<int32_t>(u2_int)) * 5.9604644775390625e-8f;
  const float r = FastSqrt(-2.0f * FastLog(u1));
  // Quadrant q = round(4 u2) ∈ [0, 4]; a = 2π (u2 - q/4) ∈ [-π/4, π/4].
  const uint32_t q = (u2_int + (1u << 21)) >> 22;
  const float a = 6.28318530717958647f * (u2 - 0.25f * static_cast<float>(static_cast<int32_t>(q)));
  const float z = a * a;
  const float s = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * a + a;
  const float c =
      ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z -
      0.5f * z + 1.0f;
  // cos(qπ/2 + a), sin(qπ/2 + a): odd quadrants swap sin and cos; cos is negative in
  // quadrants 1 and 2, sin in 2 and 3. Masks rather than branches, to vectorise.
  const uint32_t swap = 0u - (q & 1u);
  const uint32_t c_bits = FloatToBits(c), s_bits = FloatToBits(s);
  const uint32_t cos_bits = ((c_bits & ~swap) | (s_bits & swap)) ^ (((q + 1u) & 2u) << 30);
  const uint32_t sin_bits = ((s_bits & ~swap) | (c_bits & swap)) ^ ((q & 2u) << 30);
  *z0 = r * BitsToFloat(cos_bits);
  *z1 = r * BitsToFloat(sin_bits);
}

}  // namespace

void FillNormal(float* out, size_t n, uint64_t seed, float mean, float stddev, uint64_t first) {
  const uint64_t key = SplitMix64Mix(seed);
  const uint64_t first_pair = first / 2;
  const size_t pairs = n / 2;
  for (size_t p = 0; p < pairs; ++p) {
    float z0, z1;
    NormalPair(SplitMix64Mix(key + (first_pair + p + 1) * kGoldenGamma), &z0, &z1);
    out[2 * p] = mean + stddev * z0;
    out[2 * p + 1] = mean + stddev * z1;
  }
  if (n % 2 == 1) {
    float z0, z1;
    NormalPair(SplitMix64Mix(key + (first_pair + pairs + 1) * kGoldenGamma), &z0, &z1);
    out[n - 1] = mean + stddev * z0;
  }
}

void FillUniform(float* out, size_t n, uint64_t seed, float lo, float hi) {
  const uint64_t key = SplitMix64Mix(seed);
  const float scale = (hi - lo) * 5.9604644775390625e-8f;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = SplitMix64Mix(key + (i + 1) * kGoldenGamma);
    out[i] = lo + scale * static_cast<float>(static_cast<int32_t>(bits >> 40));
  }
}

}  // namespace scd
