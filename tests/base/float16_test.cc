// F16/BF16 conversions: widening checked exhaustively against an ldexp reference, narrowing
// checked on round trips of every representable value, on ties (to even), overflow and
// subnormals, and as "nearest" on random floats.
#include "common/base/float16.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "common/base/random.h"

namespace scd {
namespace {

double HalfReference(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exponent = (h >> 10) & 31;
  const int mantissa = h & 1023;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST_CASE("HalfToFloat is exact for all 65536 inputs", "[cpu]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const double ref = HalfReference(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      REQUIRE(std::isnan(f));
      // Payload kept and quiet NaNs stay NaNs through the round trip.
      REQUIRE(((FloatToBits(f) >> 13) & 0x3ff) == (h & 0x3ff));
      REQUIRE((FloatToHalf(f) & 0x7c00) == 0x7c00);
      REQUIRE((FloatToHalf(f) & 0x3ff) != 0);
      continue;
    }
    REQUIRE(static_cast<double>(f) == ref);
    REQUIRE(std::signbit(f) == ((h >> 15) != 0));
    REQUIRE(FloatToHalf(f) == h);  // every half value survives the round trip
  }
}

TEST_CASE("Bfloat16 round trips every non-NaN value exactly", "[cpu]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Bfloat16ToFloat(static_cast<uint16_t>(b));
    REQUIRE(FloatToBits(f) == b << 16);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(f))));
    } else {
      REQUIRE(FloatToBfloat16(f) == b);
    }
  }
}

TEST_CASE("FloatToHalf rounds to nearest even, overflows to inf, rounds subnormals", "[cpu]") {
  CHECK(FloatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie → even (down)
  CHECK(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie → even (up)
  CHECK(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(FloatToHalf(65504.0f) == 0x7bff);
  CHECK(FloatToHalf(65519.0f) == 0x7bff);
  CHECK(FloatToHalf(65520.0f) == 0x7c00);
  CHECK(FloatToHalf(-1e10f) == 0xfc00);
  CHECK(FloatToHalf(INFINITY) == 0x7c00);
  CHECK(FloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);      // smallest subnormal
  CHECK(FloatToHalf(std::ldexp(1.0f, -25)) == 0x0000);      // tie → even (zero)
  CHECK(FloatToHalf(3 * std::ldexp(1.0f, -25)) == 0x0002);  // 1.5 ulp → 2
  CHECK(FloatToHalf(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -30)) == 0x0400);  // → normal
  CHECK(FloatToHalf(-0.0f) == 0x8000);
  CHECK(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(FloatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(FloatToBfloat16(3.4e38f) == 0x7f80);  // rounds past the largest bf16 → inf
}

TEST_CASE("FloatToHalf and FloatToBfloat16 pick the nearest value", "[cpu]") {
  SplitMix64 rng(11);
  for (int i = 0; i < 200000; ++i) {
    // Magnitudes from 2^-26 to 2^16, both signs.
    const float x = std::ldexp(rng.NextUniform() + 0.5f, static_cast<int>(rng.NextBelow(42)) - 26) *
                    (rng.Next() & 1 ? -1.0f : 1.0f);
    const uint16_t h = FloatToHalf(x);
    const double err = std::fabs(static_cast<double>(HalfToFloat(h)) - x);
    for (int delta : {-1, 1}) {
      const uint16_t neighbour = static_cast<uint16_t>(h + delta);
      if ((neighbour & 0x7c00) == 0x7c00 || (neighbour ^ h) & 0x8000) continue;
      REQUIRE(err <= std::fabs(static_cast<double>(HalfToFloat(neighbour)) - x));
    }
    const uint16_t b = FloatToBfloat16(x);
    const double berr = std::fabs(static_cast<double>(Bfloat16ToFloat(b)) - x);
    for (int delta : {-1, 1}) {
      const uint16_t neighbour = static_cast<uint16_t>(b + delta);
      REQUIRE(berr <= std::fabs(static_cast<double>(Bfloat16ToFloat(neighbour)) - x));
    }
  }
}

TEST_CASE("Array conversions match the scalar ones at any alignment", "[cpu]") {
  const size_t n = 1001;
  std::vector<uint16_t> halves(n);
  SplitMix64 rng(3);
  for (auto& h : halves) h = static_cast<uint16_t>(rng.Next());
  std::vector<unsigned char> buffer(2 * n + 1);
  std::memcpy(buffer.data() + 1, halves.data(), 2 * n);  // deliberately misaligned
  std::vector<float> out(n);
  HalfToFloat(buffer.data() + 1, out.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const float expected = HalfToFloat(halves[i]);
    REQUIRE(std::memcmp(&out[i], &expected, 4) == 0);
  }
  Bfloat16ToFloat(buffer.data() + 1, out.data(), n);
  for (size_t i = 0; i < n; ++i) REQUIRE(FloatToBits(out[i]) == uint32_t{halves[i]} << 16);

  std::vector<float> values(n);
  FillNormal(values.data(), n, 5, 0.0f, 100.0f);
  FloatToHalf(values.data(), buffer.data() + 1, n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, buffer.data() + 1 + 2 * i, 2);
    REQUIRE(h == FloatToHalf(values[i]));
  }
  FloatToBfloat16(values.data(), buffer.data() + 1, n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, buffer.data() + 1 + 2 * i, 2);
    REQUIRE(b == FloatToBfloat16(values[i]));
  }
}

}  // namespace
}  // namespace scd
