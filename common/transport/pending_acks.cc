// The sender's acknowledgement table (see pending_acks.h).
#include "common/transport/pending_acks.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace scd::transport {

void PendingAcks::Expect(uint64_t sequence) {
  scd::MutexLock lock(&mu_);
  verdicts_[sequence] = std::nullopt;
}

void PendingAcks::Resolve(uint64_t sequence, absl::Status verdict) {
  scd::MutexLock lock(&mu_);
  auto it = verdicts_.find(sequence);
  if (it != verdicts_.end() && !it->second.has_value()) it->second = std::move(verdict);
}

void PendingAcks::FailAll(absl::Status reason) {
  scd::MutexLock lock(&mu_);
  if (failure_.ok()) failure_ = std::move(reason);
}

absl::Status PendingAcks::Await(uint64_t sequence, absl::Time deadline) {
  scd::MutexLock lock(&mu_);
  auto ready = [this, sequence]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = verdicts_.find(sequence);
    return !failure_.ok() || it == verdicts_.end() || it->second.has_value();
  };
  mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  auto it = verdicts_.find(sequence);
  absl::Status result;
  if (it != verdicts_.end() && it->second.has_value()) {
    result = *it->second;  // a verdict that arrived before a later failure still counts
  } else if (!failure_.ok()) {
    result = failure_;
  } else {
    result = absl::DeadlineExceededError(
        absl::StrCat("no acknowledgement from the receiver before the deadline (frame ", sequence,
                     " was sent)"));
  }
  if (it != verdicts_.end()) verdicts_.erase(it);
  return result;
}

void PendingAcks::Forget(uint64_t sequence) {
  scd::MutexLock lock(&mu_);
  verdicts_.erase(sequence);
}

absl::Status PendingAcks::failure() const {
  scd::MutexLock lock(&mu_);
  return failure_;
}

}  // namespace scd::transport
