// BackgroundQueue: runs posted work, in the order posted, on one thread of its own. The decode
// engine hands it what it must not pay for on its loop thread: freeing a finished SEKV
// request's host hierarchy, tens of MB to GB per layer (scd-sekv-bench, "free_s/layer": 20 ms
// per layer at 32K tokens while each basis was its own allocation, a few ms since), during
// which no running request would get its next token.
#ifndef SCD_COMMON_BASE_BACKGROUND_QUEUE_H_
#define SCD_COMMON_BASE_BACKGROUND_QUEUE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace scd {

class BackgroundQueue {
 public:
  BackgroundQueue();
  // Runs what is still queued, then stops the thread.
  ~BackgroundQueue();
  BackgroundQueue(const BackgroundQueue&) = delete;
  BackgroundQueue& operator=(const BackgroundQueue&) = delete;

  void Post(std::function<void()> work);
  // Destroys `object` on the queue's thread, after `before` (when set) runs there.
  template <typename T>
  void Release(std::unique_ptr<T> object, std::function<void()> before = nullptr) {
    if (object == nullptr) return;
    std::shared_ptr<T> held(std::move(object));
    Post([held = std::move(held), before = std::move(before)]() mutable {
      if (before) before();
      held.reset();
    });
  }
  // Returns once everything posted before the call has run.
  void Flush();
  size_t completed() const;  // work items run so far

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_;
  size_t posted_ = 0, completed_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace scd

#endif  // SCD_COMMON_BASE_BACKGROUND_QUEUE_H_
