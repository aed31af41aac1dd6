// SlowClients: many idle, slowly-sending HTTP connections held against a server on loopback,
// the way a slow-loris attacker or a crowd of stalled clients holds them. Each connection sends
// the start of a request header and then one more header byte every `trickle` period, never
// finishing it; when the server closes one (its header deadline), it is opened again, so the
// number held stays near `connections` once the ramp is over. One thread drives them all over
// one epoll set.
// Bounded by design: loopback targets only, at most 20000 connections, spread over several
// 127.0.0.0/8 source addresses so that a per-address connection cap can be respected.
#ifndef SCD_COMMON_TOOLS_LOADGEN_SLOW_CLIENTS_H_
#define SCD_COMMON_TOOLS_LOADGEN_SLOW_CLIENTS_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace scd::loadgen {

struct SlowClientOptions {
  std::string host = "127.0.0.1";  // must be in 127.0.0.0/8
  int port = 0;
  int connections = 10000;  // [1, 20000]
  // Connections per source address (127.0.1.1, 127.0.1.2, ...), at most; keep it under the
  // server's max_connections_per_client.
  int per_source = 1000;
  std::chrono::milliseconds trickle{5000};
  // Connections are opened evenly over this period rather than at once, as a crowd arrives;
  // the server's header deadlines, and so the reopening, are then spread out too.
  std::chrono::milliseconds ramp{10000};
};

class SlowClients {
 public:
  // Validates the options (InvalidArgument naming the bad one), opens the first connection and
  // starts the thread that opens the others over the ramp and keeps them open. Unavailable when
  // the first cannot be opened.
  static absl::StatusOr<std::unique_ptr<SlowClients>> Start(const SlowClientOptions& options);
  ~SlowClients();  // stops and closes every connection
  SlowClients(const SlowClients&) = delete;
  SlowClients& operator=(const SlowClients&) = delete;

  int held() const { return held_.load(); }              // open now
  int64_t reopened() const { return reopened_.load(); }  // closed by the server and reopened
  int64_t failed() const { return failed_.load(); }      // connects that failed
  int64_t answered() const { return answered_.load(); }  // responses the server sent (408s)

 private:
  struct Connection {
    int fd = -1;
    bool started = false;  // opened once (the ramp reached it)
    int source = 0;
    std::chrono::steady_clock::time_point next_byte;
  };
  explicit SlowClients(SlowClientOptions options) : options_(std::move(options)) {}
  bool Open(Connection& c);
  void Close(Connection& c);
  void Loop();
  void Service(std::chrono::steady_clock::time_point now);

  const SlowClientOptions options_;
  std::vector<Connection> connections_;  // never resized after Start: epoll holds pointers
  int epoll_fd_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> held_{0};
  std::atomic<int64_t> reopened_{0}, failed_{0}, answered_{0};
};

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_SLOW_CLIENTS_H_
