// The counter-based normal generator: determinism, stream offsets, and the moments of the
// distribution (a wrong log/sin/cos polynomial or quadrant would show up in them).
#include "common/base/random.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

namespace scd {
namespace {

TEST_CASE("FillNormal is deterministic and seed-dependent", "[cpu]") {
  std::vector<float> a(1000), b(1000), c(1000);
  FillNormal(a.data(), a.size(), 42, 0.0f, 1.0f);
  FillNormal(b.data(), b.size(), 42, 0.0f, 1.0f);
  FillNormal(c.data(), c.size(), 43, 0.0f, 1.0f);
  CHECK(a == b);
  CHECK(a != c);
  // SplitMix64's first output for seed 0 is the published 0xe220a8397b1dcdaf.
  SplitMix64 rng(0);
  CHECK(rng.Next() == 0xe220a8397b1dcdafULL);
}

TEST_CASE("FillNormal from an offset reproduces the same stream", "[cpu]") {
  const size_t n = 4097;  // odd: the last element is the first half of a pair
  std::vector<float> full(n);
  FillNormal(full.data(), n, 9, 1.0f, 2.0f);
  for (size_t first : {size_t{0}, size_t{2}, size_t{1000}, size_t{4096}}) {
    std::vector<float> part(n - first);
    FillNormal(part.data(), part.size(), 9, 1.0f, 2.0f, first);
    REQUIRE(std::equal(part.begin(), part.end(), full.begin() + first));
  }
}

TEST_CASE("FillNormal has the moments of N(mean, std^2)", "[cpu]") {
  const size_t n = 1 << 21;
  std::vector<float> x(n);
  FillNormal(x.data(), n, 1234, 0.0f, 1.0f);
  double sum = 0, sum2 = 0, sum4 = 0;
  size_t within_one = 0, within_two = 0;
  double max_abs = 0;
  for (float v : x) {
    REQUIRE(std::isfinite(v));
    sum += v;
    sum2 += double{v} * v;
    sum4 += double{v} * v * v * v;
    within_one += std::fabs(v) < 1.0f;
    within_two += std::fabs(v) < 2.0f;
    max_abs = std::max(max_abs, std::fabs(double{v}));
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  CHECK(std::fabs(mean) < 0.003);
  CHECK(std::fabs(var - 1.0) < 0.005);
  CHECK(std::fabs(sum4 / n / (var * var) - 3.0) < 0.03);  // kurtosis
  CHECK(std::fabs(double(within_one) / n - 0.682689) < 0.002);
  CHECK(std::fabs(double(within_two) / n - 0.954500) < 0.001);
  CHECK(max_abs > 4.0);
  CHECK(max_abs < 6.5);  // u1 ≥ 2^-25 bounds |z| by sqrt(2·25·ln 2) ≈ 5.9

  // Odd and even elements (cos and sin halves) are uncorrelated.
  double cross = 0;
  for (size_t i = 0; i + 1 < n; i += 2) cross += double{x[i]} * x[i + 1];
  CHECK(std::fabs(cross / (n / 2)) < 0.005);

  std::vector<float> scaled(1 << 16);
  FillNormal(scaled.data(), scaled.size(), 5, 3.0f, 0.02f);
  double s = 0, s2 = 0;
  for (float v : scaled) {
    s += v;
    s2 += double{v} * v;
  }
  const double m = s / scaled.size();
  CHECK(std::fabs(m - 3.0) < 0.001);
  CHECK(std::fabs(std::sqrt(s2 / scaled.size() - m * m) - 0.02) < 0.0005);
}

TEST_CASE("FillUniform stays in range with the right mean", "[cpu]") {
  std::vector<float> u(100000);
  FillUniform(u.data(), u.size(), 3, -2.0f, 6.0f);
  double sum = 0;
  for (float v : u) {
    REQUIRE(v >= -2.0f);
    REQUIRE(v < 6.0f);
    sum += v;
  }
  CHECK(std::fabs(sum / u.size() - 2.0) < 0.03);
}

}  // namespace
}  // namespace scd
