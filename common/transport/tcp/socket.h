// POSIX socket plumbing for the TCP transport: an owning fd, deadline-bounded full reads and
// writes on non-blocking sockets (poll, then recv/send with MSG_NOSIGNAL), socket tuning
// (TCP_NODELAY, large buffers) and the one place where errno becomes an absl::Status.
// Blocked calls wake when another thread shuts the socket down, which is how connections and
// listeners are closed without racing on the descriptor.
#ifndef SCD_COMMON_TRANSPORT_TCP_SOCKET_H_
#define SCD_COMMON_TRANSPORT_TCP_SOCKET_H_

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace scd::transport {

// errno -> absl::Status: a vanished or unreachable peer is UNAVAILABLE; the rest follows
// absl::ErrnoToStatusCode. `what` says which operation failed.
absl::Status ErrnoStatus(int error_number, const std::string& what);

// Owns one descriptor; closes it on destruction.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();

  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// Writes all `size` bytes before `deadline`. DEADLINE_EXCEEDED when time runs out.
absl::Status WriteFully(int fd, const void* data, size_t size, absl::Time deadline);

// Reads exactly `size` bytes. Waits at most until `deadline` in total and at most `stall`
// without progress. On EOF before `size` bytes: UNAVAILABLE. *done (if given) receives the
// byte count read, also on failure.
absl::Status ReadFully(int fd, void* data, size_t size, absl::Time deadline, absl::Duration stall,
                       size_t* done = nullptr);

// Non-blocking TCP connect to `address`, finished before `deadline`.
absl::StatusOr<ScopedFd> ConnectTcp(const sockaddr_in& address, absl::Time deadline);

// A non-blocking listening socket on `address`. SO_REUSEADDR lets a restarted daemon rebind
// past connections in TIME_WAIT; there is no SO_REUSEPORT, so a port that another socket
// listens on is refused (EADDRINUSE) instead of shared.
absl::StatusOr<ScopedFd> ListenTcp(const sockaddr_in& address);

// TCP_NODELAY; TCP_USER_TIMEOUT and keepalive so that a peer silent for about `peer_timeout`
// fails the socket (TransportOptions::peer_timeout); SO_SNDBUF/SO_RCVBUF of `buffer_bytes`
// where the kernel cap permits it.
void TuneSocket(int fd, int buffer_bytes, absl::Duration peer_timeout);

// The local / remote address of a socket.
absl::StatusOr<sockaddr_in> LocalAddress(int fd);
absl::StatusOr<sockaddr_in> PeerAddress(int fd);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_TCP_SOCKET_H_
