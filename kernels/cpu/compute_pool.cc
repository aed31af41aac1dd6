// See compute_pool.h.
#include "kernels/cpu/compute_pool.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace scd::cpu {
namespace {

// How long a worker spins for the next job before it sleeps: a decode step's calls come a
// few microseconds apart, steps a few milliseconds apart.
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr int kMaxDefaultThreads = 16;
// Pauses the caller spends waiting for the workers of a job before it starts yielding its core.
constexpr int kWaitSpins = 256;

thread_local bool in_pool_task = false;  // this thread is running a task of some pool

inline void Pause() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

int ComputeThreads() {
  if (const char* env = std::getenv("SCD_CPU_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 64) return static_cast<int>(n);
  }
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hw, 1, kMaxDefaultThreads);
}

ComputePool& ComputePool::Global() {
  static ComputePool* pool = new ComputePool(ComputeThreads());  // never destroyed
  return *pool;
}

ComputePool::ComputePool(int threads) : owner_pid_(getpid()) {
  for (int i = 0; i + 1 < std::max(threads, 1); ++i) {
    try {
      workers_.emplace_back(&ComputePool::WorkerLoop, this, i);
    } catch (const std::system_error&) {  // no thread to be had: fewer workers
      break;
    }
  }
}

ComputePool::~ComputePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ComputePool::Drain(const Job& job) {
  const bool was_in_task = in_pool_task;
  in_pool_task = true;
  const uint64_t tag = static_cast<uint64_t>(job.tag) << 32;
  uint64_t v = next_.load(std::memory_order_acquire);
  for (;;) {
    const int i = static_cast<int>(v & 0xffffffffu);
    if ((v & ~uint64_t{0xffffffffu}) != tag || i >= job.tasks) break;
    if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
    (*job.fn)(i);
    done_.fetch_add(1, std::memory_order_release);
    v = next_.load(std::memory_order_acquire);
  }
  in_pool_task = was_in_task;
}

void ComputePool::Run(int tasks, const std::function<void(int)>& fn, int max_threads) {
  if (tasks <= 0) return;
  auto serial = [&] {
    for (int i = 0; i < tasks; ++i) fn(i);
  };
  // Nested calls, a pool with no workers, a single task, and a child process after fork
  // (which has no workers) run on the caller.
  if (in_pool_task || workers_.empty() || tasks == 1 || max_threads == 1 ||
      getpid() != owner_pid_) {
    return serial();
  }
  std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
  if (!run.owns_lock()) return serial();  // busy with another thread's call
  int helpers = std::min(static_cast<int>(workers_.size()), tasks - 1);
  if (max_threads > 1) helpers = std::min(helpers, max_threads - 1);
  Job job{&fn, tasks, helpers + 1, 0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    job.tag = static_cast<uint32_t>(generation_.load(std::memory_order_relaxed) + 1);
    job_ = job;
    done_.store(0, std::memory_order_relaxed);
    next_.store(static_cast<uint64_t>(job.tag) << 32, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  Drain(job);
  // Only tasks already claimed are waited for: a worker that has not woken yet (descheduled
  // on a busy host) finds nothing left when it does, and is not waited for. Past a short spin
  // the caller yields, so that a worker sharing its core can finish its task.
  for (int i = 0; done_.load(std::memory_order_acquire) != tasks; ++i) {
    if (i < kWaitSpins) {
      Pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ComputePool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a while for the next job, then sleep until one comes.
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
      Pause();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
    }
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock,
                 [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
    }
    if (index < job.threads - 1) Drain(job);
  }
}

}  // namespace scd::cpu
