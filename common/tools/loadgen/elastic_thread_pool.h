// ElasticThreadPool: runs each submitted job at once on an idle thread, starting a new thread
// whenever none is idle, and keeps finished threads for later jobs. Open-loop arrivals need
// exactly this: a request that blocks (a slow stream) must never delay the next arrival, which
// a fixed pool would do as soon as all its threads were busy. The invariant that makes it so:
// threads >= jobs queued + jobs running, kept under one mutex, so a queued job always has an
// idle thread that is waiting for it or about to look at the queue. Threads therefore peak at
// the peak number of jobs in flight and are reused after that.
#ifndef SCD_COMMON_TOOLS_LOADGEN_ELASTIC_THREAD_POOL_H_
#define SCD_COMMON_TOOLS_LOADGEN_ELASTIC_THREAD_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace scd::loadgen {

class ElasticThreadPool {
 public:
  ElasticThreadPool() = default;
  ~ElasticThreadPool() { Join(); }
  ElasticThreadPool(const ElasticThreadPool&) = delete;
  ElasticThreadPool& operator=(const ElasticThreadPool&) = delete;

  // Starts `job` now. Not after Join.
  void Submit(std::function<void()> job);
  // Waits for every submitted job to finish and stops the threads. Idempotent.
  void Join();

  int threads_started() const;
  // The most jobs that were in flight (queued or running) at once.
  int peak_outstanding() const;

 private:
  void Work();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  int outstanding_ = 0;  // queued + running
  int peak_outstanding_ = 0;
  int threads_started_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_ELASTIC_THREAD_POOL_H_
