// Arrival schedules for open-loop load. A Poisson process of rate λ has independent,
// exponentially distributed gaps with mean 1/λ; gap i is -ln(U_i)/λ with U_i uniform in
// (0, 1], drawn from a seeded SplitMix64 (common/base/random.h), so a seed fixes the whole
// schedule and two runs of the same command send at the same offsets. Open loop is the point:
// the schedule never waits for responses, so a slow server sees requests pile up the way
// independent users would pile them up (closed-loop --concurrency hides that).
#ifndef SCD_COMMON_TOOLS_LOADGEN_ARRIVALS_H_
#define SCD_COMMON_TOOLS_LOADGEN_ARRIVALS_H_

#include <cstdint>
#include <vector>

#include "common/base/random.h"

namespace scd::loadgen {

class PoissonArrivals {
 public:
  // rate in requests per second, > 0.
  PoissonArrivals(double rate, uint64_t seed);

  // The next arrival, in seconds from the start of the schedule (strictly increasing).
  double Next();

 private:
  double rate_;
  SplitMix64 rng_;
  double now_s_ = 0;
};

// The first `count` arrivals of PoissonArrivals(rate, seed).
std::vector<double> PoissonSchedule(double rate, int count, uint64_t seed);

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_ARRIVALS_H_
