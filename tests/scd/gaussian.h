// Random Gaussian vectors for the calibration math tests.
#ifndef SCD_TESTS_SCD_GAUSSIAN_H_
#define SCD_TESTS_SCD_GAUSSIAN_H_

#include <random>
#include <vector>

namespace scd::testing {

// n draws of N(0, s²).
inline std::vector<float> Gaussian(size_t n, std::mt19937& rng, float s = 1.0f) {
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace scd::testing

#endif  // SCD_TESTS_SCD_GAUSSIAN_H_
