// ComputePool: every task runs exactly once, whatever the threads; nested and concurrent
// calls run on their callers instead of deadlocking; the pool survives many back-to-back jobs.
#include "kernels/cpu/compute_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace scd::cpu {
namespace {

TEST_CASE("ComputePool runs every task once for any thread and task count") {
  for (int threads : {1, 2, 3, 8}) {
    ComputePool pool(threads);
    CHECK(pool.threads() == threads);
    for (int tasks : {0, 1, 2, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(tasks);
      pool.Run(tasks, [&](int i) { hits[i].fetch_add(1); });
      INFO(threads << " threads, " << tasks << " tasks");
      for (int i = 0; i < tasks; ++i) REQUIRE(hits[i].load() == 1);
    }
  }
}

TEST_CASE("ComputePool survives many back-to-back jobs with capped thread counts") {
  ComputePool pool(4);
  long sum = 0;
  for (int job = 0; job < 20000; ++job) {
    std::vector<long> part(5, 0);
    pool.Run(
        5, [&](int i) { part[i] = i + job; }, job % 3 + 1);
    for (long v : part) sum += v;
  }
  long want = 0;
  for (int job = 0; job < 20000; ++job) want += 10 + 5L * job;
  CHECK(sum == want);
}

TEST_CASE("ComputePool runs nested and concurrent calls on their callers") {
  ComputePool pool(3);
  std::atomic<int> inner{0};
  pool.Run(6, [&](int) { pool.Run(4, [&](int) { inner.fetch_add(1); }); });
  CHECK(inner.load() == 24);
  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 500; ++r) pool.Run(8, [&](int i) { total.fetch_add(i); });
    });
  }
  for (std::thread& t : callers) t.join();
  CHECK(total.load() == 4L * 500 * 28);
}

}  // namespace
}  // namespace scd::cpu
