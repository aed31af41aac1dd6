// PendingAcks: the sender's table of DATA frames awaiting the receiver's verdict, keyed by
// the per-connection sequence number. The connection's reader resolves entries as ACKs
// arrive; when the connection breaks, every entry (and every later one) fails with the
// reason, so no Send ever waits for an acknowledgement that cannot come.
#ifndef SCD_COMMON_TRANSPORT_PENDING_ACKS_H_
#define SCD_COMMON_TRANSPORT_PENDING_ACKS_H_

#include <cstdint>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/mutex.h"

namespace scd::transport {

class PendingAcks {
 public:
  // Registers `sequence` before its frame is sent.
  void Expect(uint64_t sequence);
  // Delivers a verdict; ignored for sequences nobody waits for (the sender gave up).
  void Resolve(uint64_t sequence, absl::Status verdict);
  // Fails every pending and future entry with `reason` (the first reason wins).
  void FailAll(absl::Status reason);
  // Waits for the verdict and forgets the entry. DEADLINE_EXCEEDED when none came in time.
  absl::Status Await(uint64_t sequence, absl::Time deadline);
  // Drops an entry whose frame was never completely sent.
  void Forget(uint64_t sequence);

  // The reason given to FailAll, or OK while the connection is healthy.
  absl::Status failure() const;

 private:
  mutable scd::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::optional<absl::Status>> verdicts_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_PENDING_ACKS_H_
