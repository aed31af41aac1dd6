// The data plane: moves opaque byte payloads (serialized SCD payloads, up to hundreds of MB)
// from a prefill daemon (the sender, which connects) to a decode daemon (the receiver, which
// listens). The interface is message-oriented and has swappable implementations, as in
// Mooncake's Transport and NIXL's backends: plain TCP ("tcp://host:port") as the fallback and
// UCX UCP ("ucx://host:port"). Both pass one conformance test (tests/transport).
//
// Invariants every implementation keeps:
//   * Each message travels as one frame (frame.h) whose header and body carry CRC-32C, so
//     corruption is caught; a corrupted body is reported for that message and the connection
//     keeps serving.
//   * Send returns OK only after the receiver verified the checksum and queued the message
//     (an application-level acknowledgement), so a sender never mistakes a lost message for a
//     delivered one.
//   * Every blocking call takes a deadline; a dead peer yields an error, never a hang.
//   * All methods are thread-safe; several messages may be in flight on one connection.
//   * A message carries the sender's transfer token to the receiver unchanged. The transport
//     does not judge it: a receiver hands a message only to whoever names its token (the
//     decode daemon's PayloadMailbox, to the authenticated Decode call that names it).
#ifndef SCD_COMMON_TRANSPORT_TRANSPORT_H_
#define SCD_COMMON_TRANSPORT_TRANSPORT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace scd::transport {

// A transfer's token: random per transfer (NewTransferToken), sent in the DATA frame and,
// over an authenticated channel, to whoever may claim the message. All zero: none.
inline constexpr size_t kTransferTokenBytes = 16;
using TransferToken = std::array<uint8_t, kTransferTokenBytes>;

// A fresh token from the kernel's random source (getrandom(2)); 128 bits cannot be guessed.
TransferToken NewTransferToken();
inline bool HasToken(const TransferToken& token) { return token != TransferToken{}; }

struct TransportOptions {
  // Send-side cap in Gbit/s (10^9 bit/s), shared by every connection of one Transport, to
  // emulate a slow link. 0 = unlimited. Negative or non-finite values are invalid.
  double bandwidth_gbps = 0;
  // Largest accepted body; a larger Send fails and a frame announcing more is rejected.
  uint64_t max_message_bytes = uint64_t{1} << 31;
  // Received messages waiting for Listener::Receive; a full inbox back-pressures senders.
  size_t max_inbox_messages = 64;
  // A frame that stops making progress for this long means the peer is gone (TCP; UCX relies
  // on its own keepalive and error handling).
  absl::Duration stall_timeout = absl::Seconds(30);
  // TCP: a peer that acknowledges nothing for this long is gone. Sets TCP_USER_TIMEOUT (data in
  // flight) and keepalive probes after a third of it idle, so a pulled cable or a blackholed
  // route is noticed within about this long on a busy connection, on an idle one, and while a
  // sender waits for an ACK. The kernel defaults (15 retransmissions, about 15 min; keepalive
  // after 2 h) would hold a sender until its deadline. Whole seconds for the keepalive part.
  absl::Duration peer_timeout = absl::Seconds(30);
  // TCP: requested SO_SNDBUF/SO_RCVBUF. Applied only where the kernel cap (net.core.*mem_max)
  // allows it; otherwise the kernel's autotuning, which grows larger, is kept.
  int socket_buffer_bytes = 8 << 20;
  // UCX: the transports UCX may use (UCX_TLS syntax, e.g. "tcp,self" or "sm,tcp"). Empty =
  // the UCX_TLS environment variable or UCX's default.
  std::string ucx_transports;
  // Test hook: when set, Send passes a copy of each body through it after the checksum was
  // computed, so tests can corrupt bytes on the wire. Never set in production.
  std::function<void(uint64_t request_id, std::vector<uint8_t>& body)> tamper_for_testing;
};

// Checks ranges; the error names the field.
absl::Status ValidateOptions(const TransportOptions& options);

// One received message, or the report of one that was lost.
struct Message {
  uint64_t request_id = 0;  // 0 when the loss happened before a valid header arrived
  TransferToken token{};    // the sender's; zero when lost before the token arrived
  // OK: `body` holds the sender's bytes, checksum verified. DATA_LOSS: the checksum failed.
  // UNAVAILABLE / DEADLINE_EXCEEDED: the peer died or stalled mid-message.
  absl::Status status;
  std::unique_ptr<uint8_t[]> data;  // `size` bytes (not value-initialised; payloads are large)
  size_t size = 0;
  std::string peer;  // the sender's address, e.g. "tcp://127.0.0.1:50312"

  absl::Span<const uint8_t> body() const { return {data.get(), size}; }
};

// The sending end of one connection.
class Connection {
 public:
  virtual ~Connection() = default;

  // Sends one message with its transfer token and waits for the receiver's acknowledgement.
  // OK: delivered and verified. DATA_LOSS: the receiver's checksum failed. DEADLINE_EXCEEDED:
  // the deadline passed (a frame cut off mid-way also breaks the connection). UNAVAILABLE: the
  // peer or the connection is gone. CANCELLED: Close() was called. `bytes` must stay valid
  // until return.
  virtual absl::Status Send(uint64_t request_id, const TransferToken& token,
                            absl::Span<const uint8_t> bytes, absl::Time deadline) = 0;
  // A message without a token (transport tests and benchmarks; a decode daemon refuses it).
  absl::Status Send(uint64_t request_id, absl::Span<const uint8_t> bytes, absl::Time deadline) {
    return Send(request_id, TransferToken{}, bytes, deadline);
  }

  // Breaks the connection; in-flight and later Sends fail. Idempotent.
  virtual void Close() = 0;

  // Why the connection is unusable, or OK while it is healthy.
  virtual absl::Status health() const = 0;
  virtual const std::string& peer_address() const = 0;
};

// The receiving end: accepts connections and queues their messages.
class Listener {
 public:
  virtual ~Listener() = default;

  // The next message (or loss report) from any connection. DEADLINE_EXCEEDED when none
  // arrives in time; CANCELLED once the listener is closed.
  virtual absl::StatusOr<Message> Receive(absl::Time deadline) = 0;

  // Stops accepting, drops every connection (their senders see errors) and wakes Receive.
  virtual void Close() = 0;

  // The bound address with the real port, e.g. "tcp://127.0.0.1:41234" after binding port 0.
  virtual const std::string& address() const = 0;

  // Registers `callback`, called from a transport thread with a sender's address (as in
  // Message::peer) after that sender's connection ended and its last message was queued, so a
  // receiver can drop what a vanished sender left behind (a decode daemon's unclaimed payloads
  // after its prefill daemon died). Set it before messages flow; a later call replaces it.
  // Optional: the default implementation never calls it (UCX), and receivers fall back on
  // their own expiry.
  virtual void SetPeerClosedCallback(std::function<void(const std::string& peer)> callback) {
    (void)callback;
  }
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Binds `address` ("<scheme>://host:port"; port 0 picks an ephemeral port).
  virtual absl::StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address) = 0;

  // Connects and completes the handshake before `deadline`.
  virtual absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                              absl::Time deadline) = 0;

  // Changes the send-side cap (TransportOptions::bandwidth_gbps; 0: unlimited) of every
  // connection, open or future, from now on; INVALID_ARGUMENT outside its range.
  virtual absl::Status SetBandwidthGbps(double gbps) = 0;

  // "tcp" or "ucx".
  virtual const char* name() const = 0;
};

// The factory: kind is "tcp" or "ucx". UNAVAILABLE when UCX cannot start on this host.
absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(const std::string& kind,
                                                           const TransportOptions& options = {});

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_TRANSPORT_H_
