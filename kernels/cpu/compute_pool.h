// ComputePool: worker threads that live as long as the process, for the kernels of a decode
// step. A step makes about a hundred parallel calls (every projection of every layer), each
// a few hundred microseconds or less: starting threads per call (tens of microseconds each)
// would cost a large share of it. Workers spin a short while after each call, so that the
// next call of the same step finds them awake, then sleep until work arrives.
//
// Results never depend on the pool: a task's output must depend only on its index, never on
// which thread runs it or how many threads there are.
#ifndef SCD_KERNELS_CPU_COMPUTE_POOL_H_
#define SCD_KERNELS_CPU_COMPUTE_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace scd::cpu {

class ComputePool {
 public:
  // The process-wide pool, started on first use with ComputeThreads() threads.
  static ComputePool& Global();

  explicit ComputePool(int threads);  // threads including the caller; at least 1
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;
  ~ComputePool();

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i) once for every i in [0, tasks), on the caller and the workers, and returns
  // when every call has returned. Tasks are handed out in index order from a shared counter.
  // A call made while the pool is busy (from another thread, or from inside fn) runs every
  // task on its own caller instead of waiting. `max_threads` > 0 caps the threads used.
  void Run(int tasks, const std::function<void(int)>& fn, int max_threads = 0);

 private:
  struct Job {
    const std::function<void(int)>* fn = nullptr;
    int tasks = 0;
    int threads = 0;   // workers [0, threads - 1) take part, beside the caller
    uint32_t tag = 0;  // the job's generation, low 32 bits
  };
  void WorkerLoop(int index);
  // Claims and runs the job's tasks until none is left.
  void Drain(const Job& job);

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // held by the Run in progress
  std::mutex mu_;      // guards job_ and stop_ for sleeping workers
  std::condition_variable wake_;
  Job job_;
  std::atomic<uint64_t> generation_{0};  // bumped for every job
  // The job's tag (high 32 bits) and its next task index (low 32 bits): a task is claimed by
  // a compare-and-swap that checks the tag, so a worker that wakes late can never claim a
  // task of a later job with an earlier job's function.
  std::atomic<uint64_t> next_{0};
  std::atomic<int> done_{0};  // tasks of the current job that have returned
  bool stop_ = false;
  const int owner_pid_;  // the process that started the workers
};

// Threads of the global pool (caller included): SCD_CPU_THREADS when set to 1..64, else the
// hardware threads, at most 16. Read once, when the pool starts.
int ComputeThreads();

}  // namespace scd::cpu

#endif  // SCD_KERNELS_CPU_COMPUTE_POOL_H_
