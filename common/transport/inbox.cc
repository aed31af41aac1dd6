// The bounded receive queue (see inbox.h).
#include "common/transport/inbox.h"

#include <new>
#include <utility>

#include "common/base/huge_pages.h"

namespace scd::transport {

bool AllocateBody(size_t size, Message* message) {
  constexpr size_t kHuge = size_t{2} << 20, kMallocHeader = 16;
  // Padding the request so malloc's mmap spans whole 2 MB pages lets the kernel align it
  // (see common/base/huge_pages.cc); the padding is never touched.
  const size_t padded =
      size >= kHuge ? (size + kMallocHeader + kHuge - 1) / kHuge * kHuge - kMallocHeader : size;
  message->data.reset(new (std::nothrow) uint8_t[padded == 0 ? 1 : padded]);
  if (message->data == nullptr) return false;
  if (size >= kHuge) AdviseHugePages(message->data.get(), padded);
  message->size = size;
  return true;
}

bool Inbox::Push(Message message) {
  scd::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Inbox* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->closed_ || self->queue_.size() < self->capacity_;
      },
      this));
  if (closed_) return false;
  queue_.push_back(std::move(message));
  return true;
}

bool Inbox::TryPush(Message& message) {
  scd::MutexLock lock(&mu_);
  if (closed_ || queue_.size() >= capacity_) return false;
  queue_.push_back(std::move(message));
  return true;
}

void Inbox::PushReport(Message message) {
  scd::MutexLock lock(&mu_);
  if (!closed_) queue_.push_back(std::move(message));
}

absl::StatusOr<Message> Inbox::Pop(absl::Time deadline) {
  std::function<void()> on_space;
  Message message;
  {
    scd::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(absl::Condition(
                              +[](Inbox* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
                                return self->closed_ || !self->queue_.empty();
                              },
                              this),
                          deadline);
    if (closed_) return absl::CancelledError("listener closed");
    if (queue_.empty()) return absl::DeadlineExceededError("no message before the deadline");
    message = std::move(queue_.front());
    queue_.pop_front();
    on_space = on_space_;
  }
  if (on_space) on_space();
  return message;
}

void Inbox::Close() {
  scd::MutexLock lock(&mu_);
  closed_ = true;
  queue_.clear();
  on_space_ = nullptr;
}

void Inbox::SetOnSpace(std::function<void()> on_space) {
  scd::MutexLock lock(&mu_);
  on_space_ = std::move(on_space);
}

}  // namespace scd::transport
