// Mutex, MutexLock and Notification: the lock our threaded code (transport, control plane)
// takes, with absl::Mutex's interface (Lock/Unlock, Await, AwaitWithTimeout and
// AwaitWithDeadline on an absl::Condition), and a one-shot event with absl::Notification's.
//
// In every build but ThreadSanitizer's it *is* absl::Mutex. Under TSan it is a std::mutex
// with a condition variable, because Debian's Abseil is not built with TSan: absl::Mutex locks
// with atomics and futexes inside libabsl_synchronization.so, TSan never sees its lock and
// unlock, and every pair of accesses our code makes under one absl::Mutex is reported as a
// race. std::mutex goes through pthread, which TSan intercepts, so the same code runs under
// TSan with its real happens-before edges (tests/sanitizers/README.md).
//
// The TSan twin keeps absl's semantics for conditions: Await re-evaluates the condition with
// the lock held whenever another thread unlocks, so Unlock wakes every waiter.
#ifndef SCD_COMMON_BASE_MUTEX_H_
#define SCD_COMMON_BASE_MUTEX_H_

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#if defined(__SANITIZE_THREAD__)
#define SCD_TSAN_VISIBLE_MUTEX 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SCD_TSAN_VISIBLE_MUTEX 1
#endif
#endif

#if defined(SCD_TSAN_VISIBLE_MUTEX)
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#endif

namespace scd {

#if !defined(SCD_TSAN_VISIBLE_MUTEX)

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using Notification = absl::Notification;

#else

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    // A waiter's condition may hold now. Notified before unlocking: once unlocked, a waiter
    // may return and destroy this Mutex (a Notification on its stack, for instance).
    changed_.notify_all();
    mu_.unlock();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // Held on entry and on return; waits until `cond` is true.
  void Await(const absl::Condition& cond) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    changed_.wait(lock, [&] { return cond.Eval(); });
    lock.release();
  }
  // As Await, for at most `timeout`; whether `cond` is true on return.
  bool AwaitWithTimeout(const absl::Condition& cond, absl::Duration timeout) {
    return AwaitWithDeadline(cond, absl::Now() + timeout);
  }
  bool AwaitWithDeadline(const absl::Condition& cond, absl::Time deadline) {
    if (deadline == absl::InfiniteFuture()) {  // the chrono time point would overflow
      Await(cond);
      return true;
    }
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    const bool met =
        changed_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return cond.Eval(); });
    lock.release();
    return met;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  Mutex* const mu_;
};

class Notification {
 public:
  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
  }
  void WaitForNotification() {
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&notified_));
  }

 private:
  Mutex mu_;
  bool notified_ = false;
};

#endif

}  // namespace scd

#endif  // SCD_COMMON_BASE_MUTEX_H_
