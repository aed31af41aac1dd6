// ElasticThreadPool (see elastic_thread_pool.h).
#include "common/tools/loadgen/elastic_thread_pool.h"

#include <algorithm>
#include <utility>

namespace scd::loadgen {

void ElasticThreadPool::Submit(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(std::move(job));
  ++outstanding_;
  peak_outstanding_ = std::max(peak_outstanding_, outstanding_);
  if (outstanding_ > static_cast<int>(threads_.size())) {
    threads_.emplace_back([this] { Work(); });
    ++threads_started_;
  } else {
    wake_.notify_one();
  }
}

void ElasticThreadPool::Work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // release captures before taking the lock
    lock.lock();
    --outstanding_;
  }
}

void ElasticThreadPool::Join() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    wake_.notify_all();
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

int ElasticThreadPool::threads_started() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_started_;
}

int ElasticThreadPool::peak_outstanding() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_outstanding_;
}

}  // namespace scd::loadgen
