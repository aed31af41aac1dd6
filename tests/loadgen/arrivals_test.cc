// Open-loop machinery: the Poisson schedule's statistics under a fixed seed, and the elastic
// thread pool that keeps a blocked request from delaying later arrivals.
#include "common/tools/loadgen/arrivals.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "common/tools/loadgen/elastic_thread_pool.h"

namespace scd::loadgen {
namespace {

TEST_CASE("Poisson arrivals have the requested rate and exponential gaps", "[cpu]") {
  constexpr double kRate = 25.0;
  constexpr int kCount = 20000;
  const std::vector<double> times = PoissonSchedule(kRate, kCount, /*seed=*/1234);
  REQUIRE(times.size() == kCount);
  std::vector<double> gaps;
  double previous = 0;
  for (double t : times) {
    REQUIRE(t > previous);  // strictly increasing
    gaps.push_back(t - previous);
    previous = t;
  }
  // Mean rate within 3% (the standard error of the mean gap is 1/sqrt(20000) = 0.7%).
  CHECK(kCount / times.back() == Approx(kRate).epsilon(0.03));
  double mean = 0, var = 0;
  for (double g : gaps) mean += g;
  mean /= kCount;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= kCount - 1;
  // An exponential distribution has coefficient of variation 1.
  CHECK(std::sqrt(var) / mean == Approx(1.0).epsilon(0.05));
  // P(gap > mean) = 1/e.
  int above = 0;
  for (double g : gaps) above += g > 1.0 / kRate;
  CHECK(above / static_cast<double>(kCount) == Approx(std::exp(-1.0)).epsilon(0.05));
  // Counts per one-second window: Poisson, so variance equals the mean (25).
  std::vector<int> per_second(static_cast<size_t>(times.back()) + 1, 0);
  for (double t : times) ++per_second[static_cast<size_t>(t)];
  per_second.pop_back();  // the last, partial second
  double m = 0, v = 0;
  for (int c : per_second) m += c;
  m /= per_second.size();
  for (int c : per_second) v += (c - m) * (c - m);
  v /= per_second.size() - 1;
  CHECK(v / m == Approx(1.0).epsilon(0.15));
}

TEST_CASE("a seed fixes the Poisson schedule", "[cpu]") {
  CHECK(PoissonSchedule(10, 100, 7) == PoissonSchedule(10, 100, 7));
  CHECK(PoissonSchedule(10, 100, 7) != PoissonSchedule(10, 100, 8));
  PoissonArrivals incremental(10, 7);
  const std::vector<double> whole = PoissonSchedule(10, 5, 7);
  for (double t : whole) CHECK(incremental.Next() == t);
  // Doubling the rate halves every arrival time for the same seed.
  const std::vector<double> fast = PoissonSchedule(20, 5, 7);
  for (size_t i = 0; i < whole.size(); ++i) CHECK(fast[i] == Approx(whole[i] / 2));
}

TEST_CASE("the elastic pool starts jobs at once even when others block", "[cpu]") {
  using Clock = std::chrono::steady_clock;
  ElasticThreadPool pool;
  std::atomic<bool> release{false};
  std::atomic<int> started{0};
  constexpr int kBlocked = 40;  // far more than a typical fixed pool
  for (int i = 0; i < kBlocked; ++i) {
    pool.Submit([&] {
      ++started;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (started < kBlocked && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(started == kBlocked);  // all of them run together
  CHECK(pool.threads_started() == kBlocked);
  release = true;
  // Later jobs reuse the now-idle threads rather than starting new ones.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::atomic<int> quick{0};
  for (int i = 0; i < 10; ++i) pool.Submit([&] { ++quick; });
  pool.Join();
  CHECK(quick == 10);
  CHECK(pool.threads_started() == kBlocked);
  CHECK(pool.peak_outstanding() == kBlocked);
}

}  // namespace
}  // namespace scd::loadgen
