// Poisson arrivals by inverse-transform sampling of exponential gaps (see arrivals.h).
#include "common/tools/loadgen/arrivals.h"

#include <cmath>

namespace scd::loadgen {

PoissonArrivals::PoissonArrivals(double rate, uint64_t seed) : rate_(rate), rng_(seed) {}

double PoissonArrivals::Next() {
  // 53 random bits, shifted into (0, 1] so that the logarithm is finite.
  const double u = (static_cast<double>(rng_.Next() >> 11) + 1.0) * 0x1.0p-53;
  double gap = -std::log(u) / rate_;
  if (gap <= 0) gap = 1e-9;  // u == 1 exactly: keep arrivals strictly increasing
  now_s_ += gap;
  return now_s_;
}

std::vector<double> PoissonSchedule(double rate, int count, uint64_t seed) {
  PoissonArrivals arrivals(rate, seed);
  std::vector<double> times;
  times.reserve(count > 0 ? count : 0);
  for (int i = 0; i < count; ++i) times.push_back(arrivals.Next());
  return times;
}

}  // namespace scd::loadgen
