// Roofline measurements. All keep the best of several repetitions: the question is what the
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

// The fastest of `reps` timed runs of body(t) on `threads` threads, after one untimed run.
template <class Body>
double BestThreadedSeconds(int threads, int reps, const Body& body) {
  double best = 1e30;
  for (int r = 0; r < std::max(reps, 1) + 1; ++r) {  // the first run is a warm-up
    auto start = std::chrono::steady_clock::now();
    if (threads == 1) {
      body(0);
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
      for (std::thread& th : pool) th.join();
    }
    double seconds = Seconds(start);
    if (r > 0) best = std::min(best, seconds);
  }
  return best;
}

// Sums floats in 32 independent lanes (four 8-float vectors: the compiler emits one vector add
// per load), so that the loads, not the adds' latency, set the pace.
float SumFloats(const char* p, size_t bytes) {
  typedef float Vec8 __attribute__((vector_size(32)));
  constexpr size_t kStep = 4 * sizeof(Vec8);
  Vec8 acc[4] = {};
  for (size_t i = 0; i + kStep <= bytes; i += kStep) {
    for (int l = 0; l < 4; ++l) {
      Vec8 v;
      std::memcpy(&v, p + i + l * sizeof(Vec8), sizeof(Vec8));
      acc[l] += v;
    }
  }
  const Vec8 sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  float total = 0;
  for (int l = 0; l < 8; ++l) total += sum[l];
  return total;
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
  result.best_seconds = BestThreadedSeconds(threads, reps, copy_chunk);
  result.gbps = 2.0 * static_cast<double>(bytes) / result.best_seconds / 1e9;
  return result;
}

ReadMeasurement MeasureRead(size_t bytes, int threads, int reps) {
  threads = std::max(threads, 1);
  ReadMeasurement result{bytes, threads, 0, 0};
  auto buffer = TouchedBuffer(bytes, 0x3f);  // floats of 0.747: no subnormal adds
  if (!buffer) return result;                // allocation failed: gbps stays 0

  const size_t chunk = (bytes / threads + 127) / 128 * 128;
  std::vector<float> sums(threads);
  auto read_chunk = [&](int t) {
    size_t begin = std::min(bytes, chunk * t);
    size_t end = std::min(bytes, begin + chunk);
    sums[t] = SumFloats(buffer.get() + begin, end - begin);
  };
  result.best_seconds = BestThreadedSeconds(threads, reps, read_chunk);
  volatile float sink = 0;  // keeps the sums, so the reads cannot be dropped
  for (float s : sums) sink = sink + s;
  result.gbps = static_cast<double>(bytes) / result.best_seconds / 1e9;
  return result;
}

}  // namespace scd::bench
