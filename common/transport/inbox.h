// Inbox: the bounded queue between a listener's connections and Listener::Receive. A full
// inbox makes the receiving side stop reading, which back-pressures senders through their
// acknowledgements; loss reports bypass the bound so they never wait behind a slow consumer.
#ifndef SCD_COMMON_TRANSPORT_INBOX_H_
#define SCD_COMMON_TRANSPORT_INBOX_H_

#include <cstddef>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/mutex.h"
#include "common/transport/transport.h"

namespace scd::transport {

// Gives `message` an uninitialised buffer of `size` bytes for a body to be received into.
// Buffers of 2 MB and more are advised for transparent huge pages before first touch:
// faulting in hundreds of MB 4 KB at a time dominates receive time on virtualised hosts.
// False when the memory is not available.
bool AllocateBody(size_t size, Message* message);

class Inbox {
 public:
  explicit Inbox(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Blocks while the inbox is full; false (message dropped) once it is closed.
  bool Push(Message message);
  // Never blocks: false, leaving `message` untouched, when full or closed.
  bool TryPush(Message& message);
  // Queues a loss report regardless of the bound (dropped only when closed).
  void PushReport(Message message);

  // The oldest message; DEADLINE_EXCEEDED or, once closed, CANCELLED.
  absl::StatusOr<Message> Pop(absl::Time deadline);

  // Wakes every waiter; later pushes are dropped and pops fail.
  void Close();

  // Called, without the lock held, after a Pop made room (used by event-driven receivers).
  void SetOnSpace(std::function<void()> on_space);

 private:
  const size_t capacity_;
  scd::Mutex mu_;
  std::deque<Message> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_space_ ABSL_GUARDED_BY(mu_);
};

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_INBOX_H_
