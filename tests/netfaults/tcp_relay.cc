// See tcp_relay.h. Threads: one accept thread (inside the namespace, where it also dials the
// target), and per forwarded connection one reader and one writer per direction, handing
// chunks over through a queue stamped with their release time.
#include "tests/netfaults/tcp_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <future>

#include "tests/netfaults/netns_lab.h"

namespace scd::testing {
namespace {

using Clock = std::chrono::steady_clock;

bool MakeAddress(const std::string& host, int port, sockaddr_in* out) {
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1;
}

// A blocking socket connected to `address` within `timeout_ms`, or -1.
int Dial(const sockaddr_in& address, int timeout_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof(error);
    if (errno != EINPROGRESS || poll(&p, 1, timeout_ms) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
      close(fd);
      return -1;
    }
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

struct TcpRelay::Chunk {
  Clock::time_point due;
  std::string bytes;
  bool eof = false;
};

struct TcpRelay::Direction {
  int src = -1, dst = -1;
  std::deque<Chunk> queue;
  // Corruption scan of the client -> server stream (guarded by the relay's mu_).
  long long offset = 0;
  long long target = -1;
  std::string tail;
};

struct TcpRelay::Link {
  int client_fd = -1, server_fd = -1;
  Direction up, down;  // up: client -> server
  std::thread threads[4];
};

std::unique_ptr<TcpRelay> TcpRelay::Start(const std::string& netns, const std::string& listen_host,
                                          int listen_port, const std::string& target_host,
                                          int target_port, std::string* why) {
  std::unique_ptr<TcpRelay> relay(new TcpRelay());
  relay->netns_ = netns;
  relay->listen_host_ = listen_host;
  relay->listen_port_ = listen_port;
  relay->target_host_ = target_host;
  relay->target_port_ = target_port;
  relay->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::promise<std::string> ready;
  std::future<std::string> bound = ready.get_future();
  TcpRelay* self = relay.get();
  relay->accept_thread_ = std::thread([self, &ready] {
    std::unique_ptr<ScopedNetns> in;
    if (!self->netns_.empty()) {
      in = std::make_unique<ScopedNetns>(self->netns_);
      if (!in->ok()) return ready.set_value(in->error());
    }
    sockaddr_in address;
    if (!MakeAddress(self->listen_host_, self->listen_port_, &address)) {
      return ready.set_value("bad listen address " + self->listen_host_);
    }
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        listen(fd, 64) != 0) {
      const std::string error =
          std::string("relay bind/listen on ") + self->address() + ": " + std::strerror(errno);
      close(fd);
      return ready.set_value(error);
    }
    ready.set_value("");
    self->AcceptLoop(fd);
    close(fd);
  });
  *why = bound.get();
  if (!why->empty()) {
    relay->accept_thread_.join();
    relay->accept_thread_ = std::thread();
    return nullptr;
  }
  return relay;
}

TcpRelay::~TcpRelay() {
  stopping_.store(true);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& link : links_) {
      shutdown(link->client_fd, SHUT_RDWR);
      shutdown(link->server_fd, SHUT_RDWR);
    }
  }
  changed_.notify_all();
  for (auto& link : links_) {
    for (std::thread& t : link->threads) t.join();
    close(link->client_fd);
    close(link->server_fd);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

void TcpRelay::ArmCorruption(const std::string& pattern, size_t skip) {
  std::lock_guard<std::mutex> lock(mu_);
  pattern_ = pattern;
  skip_ = skip;
  armed_ = true;
}

void TcpRelay::SetPaused(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
  }
  changed_.notify_all();
}

void TcpRelay::AcceptLoop(int listen_fd) {
  sockaddr_in target;
  MakeAddress(target_host_, target_port_, &target);
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) <= 0 || fds[1].revents != 0) continue;
    const int client = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const int server = Dial(target, 5000);
    if (server < 0) {
      close(client);  // the target is unreachable: the client sees a hang-up
      continue;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto link = std::make_unique<Link>();
    link->client_fd = client;
    link->server_fd = server;
    link->up.src = client;
    link->up.dst = server;
    link->down.src = server;
    link->down.dst = client;
    Link* raw = link.get();
    std::lock_guard<std::mutex> lock(mu_);
    raw->threads[0] = std::thread([this, raw] { Read(raw, &raw->up, true); });
    raw->threads[1] = std::thread([this, raw] { Write(raw, &raw->up, true); });
    raw->threads[2] = std::thread([this, raw] { Read(raw, &raw->down, false); });
    raw->threads[3] = std::thread([this, raw] { Write(raw, &raw->down, false); });
    links_.push_back(std::move(link));
  }
}

void TcpRelay::Corrupt(Direction* d, char* data, size_t n) {
  // Called with mu_ held.
  if (!armed_) {
    d->target = -1;
    d->tail.clear();
  } else {
    if (d->target < 0) {
      const std::string hay = d->tail + std::string(data, n);
      const size_t pos = hay.find(pattern_);
      if (pos != std::string::npos) {
        d->target = d->offset - static_cast<long long>(d->tail.size()) +
                    static_cast<long long>(pos + skip_);
        d->tail.clear();
      } else {
        const size_t keep = std::min(hay.size(), pattern_.size() - 1);
        d->tail = hay.substr(hay.size() - keep);
      }
    }
    if (d->target >= d->offset && d->target < d->offset + static_cast<long long>(n)) {
      data[d->target - d->offset] ^= 0x5a;
      armed_ = false;
      d->target = -1;
      ++corruptions_;
    }
  }
  d->offset += static_cast<long long>(n);
}

void TcpRelay::Read(Link* link, Direction* d, bool upstream) {
  (void)link;
  std::string buffer(64 << 10, '\0');
  for (;;) {
    pollfd p{d->src, POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    if (stopping_.load()) break;
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    const ssize_t n = recv(d->src, buffer.data(), buffer.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::lock_guard<std::mutex> lock(mu_);
    if (upstream) Corrupt(d, buffer.data(), static_cast<size_t>(n));
    d->queue.push_back(Chunk{Clock::now() + std::chrono::milliseconds(delay_ms_.load()),
                             std::string(buffer.data(), static_cast<size_t>(n)), false});
    changed_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mu_);
  d->queue.push_back(Chunk{Clock::now() + std::chrono::milliseconds(delay_ms_.load()), "", true});
  changed_.notify_all();
}

void TcpRelay::Write(Link* link, Direction* d, bool upstream) {
  (void)link;
  for (;;) {
    Chunk chunk;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (stopping_.load()) return;
        if (d->queue.empty() || (upstream && paused_)) {
          changed_.wait_for(lock, std::chrono::milliseconds(100));
          continue;
        }
        const Clock::time_point due = d->queue.front().due;
        if (Clock::now() >= due) break;
        changed_.wait_until(lock, due);
      }
      chunk = std::move(d->queue.front());
      d->queue.pop_front();
    }
    if (chunk.eof) {
      shutdown(d->dst, SHUT_WR);
      return;
    }
    const char* p = chunk.bytes.data();
    size_t left = chunk.bytes.size();
    while (left > 0) {
      const ssize_t n = send(d->dst, p, left, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        shutdown(d->src, SHUT_RDWR);  // the reader ends too; the other side sees the hang-up
        shutdown(d->dst, SHUT_RDWR);
        return;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    if (upstream) forwarded_ += static_cast<long long>(chunk.bytes.size());
  }
}

}  // namespace scd::testing
