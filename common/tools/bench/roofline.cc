// Roofline measurements. Both keep the best of several repetitions: the question is what the
// machine can do, and on a shared host the slow repetitions measure the neighbours.
#include "common/tools/bench/roofline.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace scd::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Page-aligned and touched, so the first timed copy does not pay for page faults.
std::unique_ptr<char, FreeDeleter> TouchedBuffer(size_t bytes, int fill) {
  size_t rounded = (bytes + 4095) / 4096 * 4096;
  std::unique_ptr<char, FreeDeleter> buffer(static_cast<char*>(std::aligned_alloc(4096, rounded)));
  if (buffer) std::memset(buffer.get(), fill, rounded);
  return buffer;
}

}  // namespace

SgemmMeasurement MeasureSgemm(int m, int n, int k, int reps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(n) * k),
      c(static_cast<size_t>(m) * n);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);

  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a.data(), k, b.data(), k,
                0.0f, c.data(), n);
  };
  run();  // warm-up: thread pool start, page faults on c
  SgemmMeasurement result{m, n, k, 0, 0};
  result.best_seconds = 1e30;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    auto start = std::chrono::steady_clock::now();
    run();
    result.best_seconds = std::min(result.best_seconds, Seconds(start));
  }
  result.gflops = 2.0 * m * n * k / result.best_seconds / 1e9;
  return result;
}

MemcpyMeasurement MeasureMemcpy(size_t bytes, int threads, int reps) {
  threads = std::max(threads, 1);
  MemcpyMeasurement result{bytes, threads, 0, 0};
  auto src = TouchedBuffer(bytes, 1);
  auto dst = TouchedBuffer(bytes, 2);
  if (!src || !dst) return result;  // allocation failed: gbps stays 0

  const size_t chunk = (bytes / threads + 63) / 64 * 64;
  auto copy_chunk = [&](int t) {
    size_t begin = std::min(bytes, chunk * t);
    size_t end = std::min(bytes, begin + chunk);
    std::memcpy(dst.get() + begin, src.get() + begin, end - begin);
  };
  result.best_seconds = 1e30;
  for (int r = 0; r < std::max(reps, 1) + 1; ++r) {  // the first copy is a warm-up
    auto start = std::chrono::steady_clock::now();
    if (threads == 1) {
      copy_chunk(0);
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back(copy_chunk, t);
      for (std::thread& th : pool) th.join();
    }
    double seconds = Seconds(start);
    if (r > 0) result.best_seconds = std::min(result.best_seconds, seconds);
  }
  result.gbps = 2.0 * static_cast<double>(bytes) / result.best_seconds / 1e9;
  return result;
}

}  // namespace scd::bench
