// See slow_clients.h.
#include "common/tools/loadgen/slow_clients.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace scd::loadgen {
namespace {

constexpr int kMaxConnections = 20000;
constexpr char kHeaderStart[] = "GET /health HTTP/1.1\r\nHost: slow\r\nX-Slow: ";

std::string SourceAddress(int index) {
  return absl::StrCat("127.0.", 1 + index / 250, ".", 1 + index % 250);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SlowClients>> SlowClients::Start(const SlowClientOptions& o) {
  if (!absl::StartsWith(o.host, "127.")) {
    return absl::InvalidArgumentError(
        absl::StrCat("slow clients: host must be a loopback address (127.x), got ", o.host));
  }
  if (o.port < 1 || o.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("slow clients: bad port ", o.port));
  }
  if (o.connections < 1 || o.connections > kMaxConnections) {
    return absl::InvalidArgumentError(absl::StrCat("slow clients: connections must be in [1, ",
                                                   kMaxConnections, "], got ", o.connections));
  }
  if (o.per_source < 1 || o.trickle.count() < 1) {
    return absl::InvalidArgumentError("slow clients: per_source and trickle must be positive");
  }
  std::unique_ptr<SlowClients> clients(new SlowClients(o));
  clients->epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (clients->epoll_fd_ < 0)
    return absl::ResourceExhaustedError("slow clients: no epoll instance");
  clients->connections_.resize(o.connections);
  clients->start_ = std::chrono::steady_clock::now();
  for (int i = 0; i < o.connections; ++i) clients->connections_[i].source = i / o.per_source;
  clients->connections_[0].started = true;
  if (!clients->Open(clients->connections_[0])) {
    return absl::UnavailableError(
        absl::StrCat("slow clients: no connection to ", o.host, ":", o.port, " could be opened"));
  }
  clients->thread_ = std::thread([c = clients.get()] { c->Loop(); });
  return clients;
}

SlowClients::~SlowClients() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (Connection& c : connections_) Close(c);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

bool SlowClients::Open(Connection& c) {
  c.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, SourceAddress(c.source).c_str(), &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(options_.port));
  ::inet_pton(AF_INET, options_.host.c_str(), &remote.sin_addr);
  if (c.fd < 0 || ::bind(c.fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(c.fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0 ||
      ::send(c.fd, kHeaderStart, sizeof(kHeaderStart) - 1, MSG_NOSIGNAL) < 0) {
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    ++failed_;
    return false;
  }
  // Registered once: the server's rare answers and closes wake the loop, the idle majority
  // costs nothing per round (a poll() over every socket cost 0.1 core at 10,000).
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.ptr = &c;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev);
  ++held_;
  return true;
}

void SlowClients::Close(Connection& c) {
  if (c.fd < 0) return;
  ::close(c.fd);  // which also takes it out of the epoll set
  c.fd = -1;
  --held_;
}

void SlowClients::Loop() {
  while (!stop_) Service(std::chrono::steady_clock::now());
}

// One round: waits up to 100 ms for server activity, reopens what the server closed, and sends
// the next byte where it is due.
void SlowClients::Service(std::chrono::steady_clock::time_point now) {
  epoll_event events[256];
  const int ready = ::epoll_wait(epoll_fd_, events, 256, 100);
  for (int i = 0; i < ready; ++i) {
    Connection& c = *static_cast<Connection*>(events[i].data.ptr);
    if (c.fd < 0) continue;
    char buffer[4096];
    const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0 && absl::StartsWith(absl::string_view(buffer, static_cast<size_t>(n)), "HTTP/")) {
      ++answered_;
    }
    if (n <= 0) {
      Close(c);
      if (!stop_ && Open(c)) ++reopened_;
    }
  }
  // The ramp: connection i opens at start + ramp * i / connections.
  const double ramped = options_.ramp.count() > 0
                            ? std::chrono::duration<double, std::milli>(now - start_).count() /
                                  static_cast<double>(options_.ramp.count())
                            : 1.0;
  const size_t due =
      std::min(connections_.size(), static_cast<size_t>(ramped * connections_.size()) + 1);
  for (size_t i = 0; i < connections_.size(); ++i) {
    Connection& c = connections_[i];
    if (!c.started) {
      if (i >= due || stop_) continue;
      c.started = true;
      c.next_byte = now + options_.trickle;
      Open(c);
      continue;
    }
    if (c.fd < 0) {
      if (!stop_ && Open(c)) ++reopened_;
      continue;
    }
    if (now < c.next_byte) continue;
    c.next_byte = now + options_.trickle;
    if (::send(c.fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) Close(c);
  }
}

}  // namespace scd::loadgen
