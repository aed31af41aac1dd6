// See background_queue.h.
#include "common/base/background_queue.h"

#include <utility>

namespace scd {

BackgroundQueue::BackgroundQueue() : thread_([this] { Run(); }) {}

BackgroundQueue::~BackgroundQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundQueue::Post(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_.push_back(std::move(work));
    ++posted_;
  }
  cv_.notify_all();
}

void BackgroundQueue::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  const size_t target = posted_;
  cv_.wait(lock, [&] { return completed_ >= target; });
}

size_t BackgroundQueue::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

void BackgroundQueue::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !work_.empty(); });
    if (work_.empty()) return;  // stop_, and nothing left
    std::function<void()> work = std::move(work_.front());
    work_.pop_front();
    lock.unlock();
    work();
    work = nullptr;  // what it holds is destroyed here too, off the caller's thread
    lock.lock();
    ++completed_;
    cv_.notify_all();
  }
}

}  // namespace scd
