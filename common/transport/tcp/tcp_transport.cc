// The TCP transport (see tcp_transport.h). Threads and their jobs:
//   TcpConnection  caller threads write DATA frames through FrameSender; one reader thread
//                  per connection reads HELLO once, then ACKs, and fails every pending Send
//                  when the stream ends.
//   TcpListener    one accept thread; one thread per accepted connection that sends HELLO,
//                  then reads DATA frames, verifies them, queues them in the Inbox and ACKs.
// Close() shuts the socket down (waking any poll on it); descriptors are closed only by their
// owner's destructor, after its threads have joined, so no thread ever sees a reused fd.
#include "common/transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <list>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/mutex.h"
#include "common/base/status_macros.h"
#include "common/transport/address.h"
#include "common/transport/bandwidth_limiter.h"
#include "common/transport/frame.h"
#include "common/transport/frame_sender.h"
#include "common/transport/inbox.h"
#include "common/transport/tcp/socket.h"

namespace scd::transport {
namespace {

constexpr char kScheme[] = "tcp";
// ACK bodies are short error texts; anything longer is a protocol violation.
constexpr uint64_t kMaxAckBodyBytes = 64 << 10;

// Reads one frame header: waits without limit for its first byte (an idle connection is
// fine), then at most `stall` between bytes. *clean_eof: the peer closed between frames.
absl::StatusOr<FrameHeader> ReadHeader(int fd, uint64_t max_body, absl::Time deadline,
                                       absl::Duration stall, bool* clean_eof) {
  EncodedHeader bytes;
  size_t got = 0;
  *clean_eof = false;
  absl::Status status = ReadFully(fd, bytes.data(), 1, deadline, absl::InfiniteDuration(), &got);
  if (!status.ok()) {
    *clean_eof = got == 0 && absl::IsUnavailable(status);
    return status;
  }
  SCD_RETURN_IF_ERROR(ReadFully(fd, bytes.data() + 1, bytes.size() - 1, deadline, stall));
  return DecodeHeader(bytes, max_body);
}

class TcpConnection : public Connection {
 public:
  static absl::StatusOr<std::unique_ptr<Connection>> Create(
      const std::string& address, absl::Time deadline, const TransportOptions& options,
      std::shared_ptr<BandwidthLimiter> limiter) {
    SCD_ASSIGN_OR_RETURN(const sockaddr_in target, ResolveAddress(address, kScheme));
    auto fd = ConnectTcp(target, deadline);
    if (!fd.ok()) {
      return absl::Status(fd.status().code(),
                          absl::StrCat("connecting to ", address, ": ", fd.status().message()));
    }
    TuneSocket(fd->get(), options.socket_buffer_bytes, options.peer_timeout);
    // The receiver speaks first; a listener that accepts but never answers is not a peer.
    bool clean_eof = false;
    auto hello = ReadHeader(fd->get(), 0, deadline, options.stall_timeout, &clean_eof);
    if (!hello.ok() || hello->type != FrameType::kHello) {
      const absl::Status why =
          hello.ok() ? absl::DataLossError("first frame is not HELLO") : hello.status();
      return absl::Status(why.code(),
                          absl::StrCat("handshake with ", address, ": ", why.message()));
    }
    return std::unique_ptr<Connection>(
        new TcpConnection(std::move(*fd), address, options, std::move(limiter)));
  }

  ~TcpConnection() override {
    Close();
    reader_.join();
  }

  using Connection::Send;
  absl::Status Send(uint64_t request_id, const TransferToken& token,
                    absl::Span<const uint8_t> bytes, absl::Time deadline) override {
    return sender_.Send(request_id, token, bytes, deadline);
  }

  void Close() override { sender_.Break(absl::CancelledError("connection closed locally")); }

  absl::Status health() const override { return sender_.acks().failure(); }
  const std::string& peer_address() const override { return peer_; }

 private:
  TcpConnection(ScopedFd fd, std::string peer, const TransportOptions& options,
                std::shared_ptr<BandwidthLimiter> limiter)
      : fd_(std::move(fd)),
        peer_(std::move(peer)),
        options_(options),
        sender_(
            options_, std::move(limiter),
            [this](const uint8_t* data, size_t size, absl::Time deadline) {
              return WriteFully(fd_.get(), data, size, deadline);
            },
            [this](const absl::Status&) { shutdown(fd_.get(), SHUT_RDWR); }) {
    reader_ = std::thread([this] { ReadAcks(); });
  }

  void ReadAcks() {
    absl::Status why;
    for (;;) {
      bool clean_eof = false;
      auto ack = ReadHeader(fd_.get(), kMaxAckBodyBytes, absl::InfiniteFuture(),
                            options_.stall_timeout, &clean_eof);
      if (!ack.ok()) {
        why = ack.status();
        break;
      }
      if (ack->type != FrameType::kAck) {
        why = absl::DataLossError("unexpected frame type from the receiver");
        break;
      }
      std::string text(ack->body_length, '\0');
      why = ReadFully(fd_.get(), text.data(), text.size(), absl::InfiniteFuture(),
                      options_.stall_timeout);
      if (!why.ok()) break;
      const absl::Span<const uint8_t> body(reinterpret_cast<const uint8_t*>(text.data()),
                                           text.size());
      why = VerifyBody(*ack, body);
      if (!why.ok()) break;
      sender_.acks().Resolve(ack->sequence, AckToStatus(*ack, body));
    }
    sender_.Break(
        absl::UnavailableError(absl::StrCat("connection to ", peer_, " lost: ", why.message())));
  }

  ScopedFd fd_;
  const std::string peer_;
  const TransportOptions options_;
  FrameSender sender_;
  std::thread reader_;
};

class TcpListener : public Listener {
 public:
  static absl::StatusOr<std::unique_ptr<Listener>> Create(const std::string& address,
                                                          const TransportOptions& options) {
    SCD_ASSIGN_OR_RETURN(const sockaddr_in bind_to, ResolveAddress(address, kScheme));
    auto fd = ListenTcp(bind_to);
    if (!fd.ok()) {
      return absl::Status(fd.status().code(),
                          absl::StrCat("listening on ", address, ": ", fd.status().message()));
    }
    SCD_ASSIGN_OR_RETURN(const sockaddr_in bound, LocalAddress(fd->get()));
    ScopedFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (wake.get() < 0) return ErrnoStatus(errno, "eventfd");
    return std::unique_ptr<Listener>(
        new TcpListener(std::move(*fd), std::move(wake), FormatAddress(kScheme, bound), options));
  }

  ~TcpListener() override { Close(); }

  absl::StatusOr<Message> Receive(absl::Time deadline) override { return inbox_.Pop(deadline); }

  void Close() override {
    scd::MutexLock lock(&close_mu_);  // a concurrent Close returns only once this one is done
    if (closing_.exchange(true)) return;
    inbox_.Close();  // wakes readers blocked on a full inbox
    const uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof(one));
    accept_thread_.join();
    std::list<std::unique_ptr<Peer>> peers;
    {
      scd::MutexLock peers_lock(&peers_mu_);
      peers.swap(peers_);
    }
    for (auto& peer : peers) shutdown(peer->fd.get(), SHUT_RDWR);
    for (auto& peer : peers) peer->thread.join();
  }

  const std::string& address() const override { return address_; }

  void SetPeerClosedCallback(std::function<void(const std::string& peer)> callback) override {
    scd::MutexLock lock(&callback_mu_);
    peer_closed_ = std::move(callback);
  }

 private:
  struct Peer {
    ScopedFd fd;
    std::string address;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  TcpListener(ScopedFd fd, ScopedFd wake, std::string address, const TransportOptions& options)
      : fd_(std::move(fd)),
        wake_(std::move(wake)),
        address_(std::move(address)),
        options_(options),
        inbox_(options.max_inbox_messages) {
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  void AcceptLoop() {
    for (;;) {
      pollfd fds[2] = {{fd_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
      if (fds[1].revents != 0 || closing_.load()) return;
      ScopedFd conn(accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (conn.get() < 0) continue;  // EAGAIN, a connection reset before accept, EMFILE, ...
      TuneSocket(conn.get(), options_.socket_buffer_bytes, options_.peer_timeout);
      auto peer = std::make_unique<Peer>();
      auto remote = PeerAddress(conn.get());
      peer->address = remote.ok() ? FormatAddress(kScheme, *remote) : "tcp://unknown";
      peer->fd = std::move(conn);
      Peer* raw = peer.get();
      scd::MutexLock lock(&peers_mu_);
      ReapFinishedLocked();
      peer->thread = std::thread([this, raw] {
        Serve(*raw);
        shutdown(raw->fd.get(), SHUT_RDWR);  // the peer sees the hang-up now; close on reap
        if (!closing_.load()) NotifyPeerClosed(raw->address);
        raw->done.store(true);
      });
      peers_.push_back(std::move(peer));
    }
  }

  void ReapFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(peers_mu_) {
    for (auto it = peers_.begin(); it != peers_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        it = peers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Runs on the peer's thread after its last message was queued (see transport.h).
  void NotifyPeerClosed(const std::string& peer) {
    scd::MutexLock lock(&callback_mu_);
    if (peer_closed_) peer_closed_(peer);
  }

  // Loss reports name the peer and keep the request id when the header was valid, and the
  // token when it had arrived.
  void Report(const Peer& peer, uint64_t request_id, const absl::Status& why,
              const TransferToken& token = {}) {
    Message report;
    report.request_id = request_id;
    report.token = token;
    report.status =
        absl::Status(why.code(), absl::StrCat("from ", peer.address, ": ", why.message()));
    report.peer = peer.address;
    inbox_.PushReport(std::move(report));
  }

  // The transfer token after a DATA header, checked against the header's CRC of it. An error
  // drops the connection (a bad token CRC is a damaged header: the stream is lost).
  absl::Status ReadToken(int fd, const FrameHeader& header, TransferToken* token) {
    absl::Status read =
        ReadFully(fd, token->data(), token->size(), absl::InfiniteFuture(), options_.stall_timeout);
    if (read.ok()) read = VerifyToken(header, *token);
    if (read.ok()) return read;
    return absl::Status(read.code(),
                        absl::StrCat("request ", header.request_id,
                                     ": transfer token: ", read.message(), "; connection dropped"));
  }

  void Serve(const Peer& peer) {
    const int fd = peer.fd.get();
    const EncodedHeader hello = EncodeHeader(FrameHeader{FrameType::kHello});
    if (!WriteFully(fd, hello.data(), hello.size(), absl::Now() + options_.stall_timeout).ok()) {
      return;
    }
    for (;;) {
      bool clean_eof = false;
      auto header = ReadHeader(fd, options_.max_message_bytes, absl::InfiniteFuture(),
                               options_.stall_timeout, &clean_eof);
      if (!header.ok()) {
        // A peer hanging up between frames is normal; anything else loses the connection.
        if (!clean_eof && !closing_.load()) {
          Report(peer, 0,
                 absl::Status(header.status().code(),
                              absl::StrCat(header.status().message(), "; connection dropped")));
        }
        return;
      }
      if (header->type != FrameType::kData) {
        Report(peer, 0, absl::DataLossError("unexpected frame type; connection dropped"));
        return;
      }
      Message message;
      message.request_id = header->request_id;
      message.peer = peer.address;
      if (absl::Status read = ReadToken(fd, *header, &message.token); !read.ok()) {
        if (!closing_.load()) Report(peer, 0, read);  // a damaged frame's id is not trusted
        return;
      }
      if (!AllocateBody(header->body_length, &message)) {
        Report(peer, header->request_id,
               absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", header->body_length,
                                                         " bytes; connection dropped")),
               message.token);
        return;
      }
      size_t got = 0;
      absl::Status body = ReadFully(fd, message.data.get(), message.size, absl::InfiniteFuture(),
                                    options_.stall_timeout, &got);
      if (!body.ok()) {
        if (!closing_.load()) {
          Report(peer, header->request_id,
                 absl::Status(body.code(),
                              absl::StrCat("request ", header->request_id, " cut off after ", got,
                                           " of ", message.size, " body bytes: ", body.message())),
                 message.token);
        }
        return;
      }
      absl::Status verdict = VerifyBody(*header, message.body());
      if (verdict.ok()) {
        if (!inbox_.Push(std::move(message))) return;  // closed
      } else {
        Report(peer, header->request_id, verdict, message.token);
      }
      std::string text;
      const EncodedHeader ack = EncodeHeader(MakeAck(*header, verdict, &text));
      const absl::Time deadline = absl::Now() + options_.stall_timeout;
      if (!WriteFully(fd, ack.data(), ack.size(), deadline).ok() ||
          !WriteFully(fd, text.data(), text.size(), deadline).ok()) {
        return;
      }
    }
  }

  const ScopedFd fd_;
  const ScopedFd wake_;
  const std::string address_;
  const TransportOptions options_;
  Inbox inbox_;
  std::atomic<bool> closing_{false};
  scd::Mutex close_mu_;
  std::thread accept_thread_;
  scd::Mutex peers_mu_;
  std::list<std::unique_ptr<Peer>> peers_ ABSL_GUARDED_BY(peers_mu_);
  scd::Mutex callback_mu_;
  std::function<void(const std::string&)> peer_closed_ ABSL_GUARDED_BY(callback_mu_);
};

class TcpTransport : public Transport {
 public:
  TcpTransport(const TransportOptions& options, std::shared_ptr<BandwidthLimiter> limiter)
      : options_(options), limiter_(std::move(limiter)) {}

  absl::StatusOr<std::unique_ptr<Listener>> Listen(const std::string& address) override {
    return TcpListener::Create(address, options_);
  }

  absl::StatusOr<std::unique_ptr<Connection>> Connect(const std::string& address,
                                                      absl::Time deadline) override {
    return TcpConnection::Create(address, deadline, options_, limiter_);
  }

  const char* name() const override { return kScheme; }

  absl::Status SetBandwidthGbps(double gbps) override { return limiter_->SetGbps(gbps); }

 private:
  const TransportOptions options_;
  const std::shared_ptr<BandwidthLimiter> limiter_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateTcpTransport(const TransportOptions& options) {
  SCD_RETURN_IF_ERROR(ValidateOptions(options));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<BandwidthLimiter> limiter,
                       BandwidthLimiter::Create(options.bandwidth_gbps));
  return std::unique_ptr<Transport>(
      new TcpTransport(options, std::shared_ptr<BandwidthLimiter>(std::move(limiter))));
}

}  // namespace scd::transport
