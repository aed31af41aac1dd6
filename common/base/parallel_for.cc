// See parallel_for.h. Threads are created per call: the callers run a handful of times per
// process (model load, digest), where thread start-up (~10 µs) is noise next to the work.
#include "common/base/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace scd {

void ParallelFor(size_t count, const std::function<void(size_t)>& fn, size_t max_threads) {
  if (count == 0) return;
  if (max_threads == 0) {
    max_threads = std::min<size_t>(16, std::max(1u, std::thread::hardware_concurrency()));
  }
  const size_t threads = std::min(max_threads, count);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < count; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

}  // namespace scd
