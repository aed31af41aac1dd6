// Socket plumbing for the TCP transport (see socket.h). This file is the only place where
// errno values become absl::Status.
#include "common/transport/tcp/socket.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace scd::transport {
namespace {

// Milliseconds for poll(): -1 for an unbounded wait, never negative otherwise.
int PollTimeoutMs(absl::Time until) {
  if (until == absl::InfiniteFuture()) return -1;
  const absl::Duration left = until - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

// Waits for `events` on fd until `until`. OK when ready (or hung up: the next call reports
// why); DEADLINE_EXCEEDED on timeout.
absl::Status WaitFor(int fd, short events, absl::Time until, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, PollTimeoutMs(until));
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) {
      if (absl::Now() < until) continue;  // poll rounds to milliseconds
      return absl::DeadlineExceededError(absl::StrCat(what, " timed out"));
    }
    if (errno != EINTR) return ErrnoStatus(errno, std::string("poll while ") + what);
  }
}

int ReadMemMax(const char* path) {
  std::ifstream in(path);
  long value = 0;
  return (in >> value) ? static_cast<int>(std::min<long>(value, 1 << 30)) : 0;
}

}  // namespace

absl::Status ErrnoStatus(int error_number, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(error_number));
  switch (error_number) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ENOTCONN:
    case ESHUTDOWN:
    case ENETUNREACH:
    case ENETDOWN:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ETIMEDOUT:
      return absl::UnavailableError(message);
    default:
      return absl::Status(absl::ErrnoToStatusCode(error_number), message);
  }
}

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

int ScopedFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::Status WriteFully(int fd, const void* data, size_t size, absl::Time deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Now() >= deadline) return absl::DeadlineExceededError("send timed out");
      absl::Status ready = WaitFor(fd, POLLOUT, deadline, "send");
      if (!ready.ok()) return ready;
      continue;
    }
    return ErrnoStatus(n < 0 ? errno : EPIPE, "send");
  }
  return absl::OkStatus();
}

absl::Status ReadFully(int fd, void* data, size_t size, absl::Time deadline, absl::Duration stall,
                       size_t* done) {
  auto* p = static_cast<uint8_t*>(data);
  size_t got = 0;
  absl::Status status;
  absl::Time last_progress = absl::Now();
  while (got < size) {
    const ssize_t n = recv(fd, p + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      last_progress = absl::Now();
      continue;
    }
    if (n == 0) {
      status = absl::UnavailableError("peer closed the connection");
      break;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      status = ErrnoStatus(errno, "recv");
      break;
    }
    const absl::Time until = std::min(deadline, last_progress + stall);
    if (absl::Now() >= until) {
      status = absl::DeadlineExceededError(until == deadline ? "recv timed out"
                                                             : "peer stalled mid-frame");
      break;
    }
    status = WaitFor(fd, POLLIN, until, "recv");
    if (!status.ok()) {
      if (absl::IsDeadlineExceeded(status) && until != deadline) {
        status = absl::DeadlineExceededError(
            absl::StrCat("peer stalled mid-frame for ", absl::FormatDuration(stall)));
      }
      break;
    }
  }
  if (done != nullptr) *done = got;
  return status;
}

absl::StatusOr<ScopedFd> ConnectTcp(const sockaddr_in& address, absl::Time deadline) {
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoStatus(errno, "socket");
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    if (errno != EINPROGRESS) return ErrnoStatus(errno, "connect");
    absl::Status ready = WaitFor(fd.get(), POLLOUT, deadline, "connect");
    if (!ready.ok()) return ready;
    int error = 0;
    socklen_t len = sizeof(error);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) {
      return ErrnoStatus(errno, "getsockopt(SO_ERROR)");
    }
    if (error != 0) return ErrnoStatus(error, "connect");
  }
  return fd;
}

absl::StatusOr<ScopedFd> ListenTcp(const sockaddr_in& address) {
  ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoStatus(errno, "socket");
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return ErrnoStatus(errno, "bind");
  }
  if (listen(fd.get(), SOMAXCONN) != 0) return ErrnoStatus(errno, "listen");
  return fd;
}

void TuneSocket(int fd, int buffer_bytes, absl::Duration peer_timeout) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A peer that vanished without a FIN or RST (pulled link, partition, power loss) must fail
  // the socket, or a sender waits for its ACK until the request deadline. TCP_USER_TIMEOUT
  // bounds how long sent data may stay unacknowledged (default: ~15 min of retransmissions);
  // keepalive probes after a third of it idle give the same bound on idle connections and
  // while waiting for an ACK (the kernel then drops the connection once the user timeout has
  // passed without an answer, whatever TCP_KEEPCNT says).
  const int64_t timeout_ms = std::max<int64_t>(1000, absl::ToInt64Milliseconds(peer_timeout));
  const unsigned int user_timeout_ms =
      static_cast<unsigned int>(std::min<int64_t>(timeout_ms, 1 << 30));
  const int idle_s = static_cast<int>(std::clamp<int64_t>(timeout_ms / 3000, 1, 32767));
  const int interval_s = static_cast<int>(std::clamp<int64_t>(timeout_ms / 6000, 1, 32767));
  const int probes = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  // Setting a buffer size switches off the kernel's autotuning, which would otherwise grow up
  // to tcp_wmem/tcp_rmem[2]; only do it where the cap lets us reach the requested size.
  static const int wmem_max = ReadMemMax("/proc/sys/net/core/wmem_max");
  static const int rmem_max = ReadMemMax("/proc/sys/net/core/rmem_max");
  if (buffer_bytes <= 0) return;
  if (wmem_max >= buffer_bytes) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
  if (rmem_max >= buffer_bytes) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
}

absl::StatusOr<sockaddr_in> LocalAddress(int fd) {
  sockaddr_in out;
  socklen_t len = sizeof(out);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&out), &len) != 0) {
    return ErrnoStatus(errno, "getsockname");
  }
  return out;
}

absl::StatusOr<sockaddr_in> PeerAddress(int fd) {
  sockaddr_in out;
  socklen_t len = sizeof(out);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&out), &len) != 0) {
    return ErrnoStatus(errno, "getpeername");
  }
  return out;
}

}  // namespace scd::transport
