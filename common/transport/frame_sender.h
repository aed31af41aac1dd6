// FrameSender: the sending half of a connection that both transports share. It owns what
// makes Send correct (one frame on the wire at a time, sequence numbers, checksums, pacing by
// the BandwidthLimiter, the tamper test hook, waiting for the ACK) and delegates only the
// byte movement to the transport through a blocking write function.
//
// A write that fails or times out part-way leaves the byte stream mid-frame, which cannot be
// repaired: the connection is marked broken (every pending and later Send fails with the
// reason) and the transport's on_broken callback tears the connection down.
#ifndef SCD_COMMON_TRANSPORT_FRAME_SENDER_H_
#define SCD_COMMON_TRANSPORT_FRAME_SENDER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/mutex.h"
#include "common/transport/bandwidth_limiter.h"
#include "common/transport/frame.h"
#include "common/transport/pending_acks.h"
#include "common/transport/transport.h"

namespace scd::transport {

class FrameSender {
 public:
  // Writes all `size` bytes before `deadline` or fails; called by one thread at a time.
  using WriteFn = std::function<absl::Status(const uint8_t* data, size_t size, absl::Time)>;
  // Tears the connection down after it broke; called once, with the reason.
  using BrokenFn = std::function<void(const absl::Status& reason)>;

  // `limiter` may be null (unlimited).
  FrameSender(const TransportOptions& options, std::shared_ptr<BandwidthLimiter> limiter,
              WriteFn write, BrokenFn on_broken);

  // Connection::Send semantics (transport.h).
  absl::Status Send(uint64_t request_id, const TransferToken& token,
                    absl::Span<const uint8_t> bytes, absl::Time deadline);

  // Marks the connection broken with `reason` (the first reason wins) and calls on_broken.
  void Break(const absl::Status& reason);

  // The connection's ACK table, fed by the transport's reader.
  PendingAcks& acks() { return acks_; }
  const PendingAcks& acks() const { return acks_; }

 private:
  // Writes header (with the token, frame.h) and body, paced by the limiter. *started: whether
  // any byte was handed to the wire (before that, a failure leaves the stream intact).
  absl::Status WriteFrame(absl::Span<const uint8_t> header, absl::Span<const uint8_t> body,
                          absl::Time deadline, bool* started);

  const TransportOptions& options_;
  const std::shared_ptr<BandwidthLimiter> limiter_;
  const WriteFn write_;
  const BrokenFn on_broken_;
  PendingAcks acks_;

  scd::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a frame is on the wire
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_FRAME_SENDER_H_
