// The shared sending half of a connection (see frame_sender.h).
#include "common/transport/frame_sender.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace scd::transport {

FrameSender::FrameSender(const TransportOptions& options, std::shared_ptr<BandwidthLimiter> limiter,
                         WriteFn write, BrokenFn on_broken)
    : options_(options),
      limiter_(std::move(limiter)),
      write_(std::move(write)),
      on_broken_(std::move(on_broken)) {}

absl::Status FrameSender::Send(uint64_t request_id, const TransferToken& token,
                               absl::Span<const uint8_t> bytes, absl::Time deadline) {
  if (bytes.size() > options_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("request ", request_id, ": ", bytes.size(),
                                                   " bytes exceed max_message_bytes (",
                                                   options_.max_message_bytes, ")"));
  }
  // The checksum is computed before waiting for the wire, overlapping other senders' frames.
  FrameHeader header = MakeData(request_id, token, bytes);
  std::vector<uint8_t> tampered;
  if (options_.tamper_for_testing) {
    tampered.assign(bytes.begin(), bytes.end());
    options_.tamper_for_testing(request_id, tampered);
    bytes = tampered;
  }

  {
    scd::MutexLock lock(&mu_);
    auto wire_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writing_ || broken_; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&wire_free), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "request ", request_id, ": deadline passed while earlier messages held the connection"));
    }
    if (broken_) return acks_.failure();
    writing_ = true;
    header.sequence = next_sequence_++;
  }
  acks_.Expect(header.sequence);
  bool started = false;
  // One write for the header and the token that follows it.
  std::array<uint8_t, kFrameHeaderBytes + kTransferTokenBytes> prefix;
  const EncodedHeader encoded = EncodeHeader(header);
  std::copy(encoded.begin(), encoded.end(), prefix.begin());
  std::copy(token.begin(), token.end(), prefix.begin() + kFrameHeaderBytes);
  const absl::Status written = WriteFrame(prefix, bytes, deadline, &started);
  {
    scd::MutexLock lock(&mu_);
    writing_ = false;
  }
  if (!written.ok()) {
    acks_.Forget(header.sequence);
    // Nothing on the wire yet (the pacer ran out of time): the stream is intact.
    if (!started && acks_.failure().ok()) return written;
    Break(absl::Status(written.code(), absl::StrCat("connection broken mid-frame (request ",
                                                    request_id, "): ", written.message())));
    return acks_.failure();
  }
  return acks_.Await(header.sequence, deadline);
}

void FrameSender::Break(const absl::Status& reason) {
  {
    scd::MutexLock lock(&mu_);
    if (broken_) return;
    broken_ = true;
  }
  acks_.FailAll(reason);
  if (on_broken_) on_broken_(acks_.failure());
}

absl::Status FrameSender::WriteFrame(absl::Span<const uint8_t> header,
                                     absl::Span<const uint8_t> body, absl::Time deadline,
                                     bool* started) {
  const bool paced = limiter_ != nullptr && !limiter_->unlimited();
  *started = !paced;
  if (!paced) {
    absl::Status status = write_(header.data(), header.size(), deadline);
    if (status.ok() && !body.empty()) status = write_(body.data(), body.size(), deadline);
    return status;
  }
  absl::Status status = limiter_->Acquire(header.size(), deadline);
  if (!status.ok()) return status;
  *started = true;
  status = write_(header.data(), header.size(), deadline);
  for (size_t offset = 0; status.ok() && offset < body.size();) {
    const size_t chunk = std::min(BandwidthLimiter::kChunkBytes, body.size() - offset);
    status = limiter_->Acquire(chunk, deadline);
    if (status.ok()) status = write_(body.data() + offset, chunk, deadline);
    offset += chunk;
  }
  return status;
}

}  // namespace scd::transport
