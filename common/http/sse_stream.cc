// SseStream (see http_server.h): a queue of framed events between a producer (any thread) and
// the connection that writes them (an I/O thread). The producer never waits on the socket; the
// connection is told through its notifier that there is something to write.
#include "common/http/http_server.h"
#include "common/http/openai_error.h"
#include "common/http/sse.h"

namespace scd::http {

bool SseStream::Send(std::string payload) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || cancelled_) return false;
    queue_.push_back(SseEvent(payload));
    notify = notify_;
  }
  if (notify) notify();
  return true;
}

void SseStream::Finish() {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_ || cancelled_) return;
    queue_.push_back(SseEvent(kSseDonePayload));
    finished_ = true;
    notify = notify_;
  }
  if (notify) notify();
}

void SseStream::Fail(const absl::Status& status) {
  Send(DumpJson(ErrorJson(status)));
  Finish();
}

bool SseStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

void SseStream::OnCancel(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!cancelled_) {
      if (!delivered_) on_cancel_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

bool SseStream::WaitCancelled(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return cancelled_; });
}

SseStream::Pull SseStream::Take(std::string* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cancelled_) return Pull::kCancelled;
  if (delivered_) return Pull::kDone;
  if (queue_.empty()) return Pull::kIdle;
  out->clear();
  for (const std::string& event : queue_) out->append(event);
  queue_.clear();
  if (finished_) {
    delivered_ = true;  // [DONE] is in *out
    on_cancel_.clear();
  }
  return Pull::kData;
}

void SseStream::SetNotifier(std::function<void()> notify) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    notify_ = notify;
  }
  notify();
}

void SseStream::Cancel() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_ || delivered_) return;
    cancelled_ = true;
    notify_ = nullptr;
    callbacks.swap(on_cancel_);
    changed_.notify_all();
  }
  for (auto& callback : callbacks) callback();
}

bool SseStream::Delivered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return delivered_;
}

}  // namespace scd::http
