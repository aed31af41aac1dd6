// TcpRelay: a user-space TCP forwarder the fault tests put between two daemons, standing in
// for what `tc netem` would do on a kernel that has it (this one lacks sch_netem):
//   * delay: every chunk is forwarded `delay` after it arrived, in each direction (one-way
//     latency; the round trip grows by twice that), order preserved;
//   * corruption: one byte is flipped at a chosen distance after the next occurrence of a
//     byte pattern in the client -> server stream (e.g. 104 bytes into an SCD payload, after
//     its "SCDW" magic), once per ArmCorruption;
//   * pause: client -> server bytes are held (not dropped) until resumed.
// The relay listens inside a network namespace (created on its own thread, see
// netns_lab.h) and dials the target from there. Connections are forwarded independently;
// either side closing half-closes the other, and destruction closes everything.
#ifndef SCD_TESTS_NETFAULTS_TCP_RELAY_H_
#define SCD_TESTS_NETFAULTS_TCP_RELAY_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace scd::testing {

class TcpRelay {
 public:
  // Listens on listen_host:listen_port inside namespace `netns` ("" = the caller's) and
  // forwards to target_host:target_port. Null with *why on failure.
  static std::unique_ptr<TcpRelay> Start(const std::string& netns, const std::string& listen_host,
                                         int listen_port, const std::string& target_host,
                                         int target_port, std::string* why);
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  std::string address() const { return listen_host_ + ":" + std::to_string(listen_port_); }

  void SetDelay(std::chrono::milliseconds delay) { delay_ms_.store(delay.count()); }
  void ArmCorruption(const std::string& pattern, size_t skip);
  int corruptions() const { return corruptions_.load(); }
  void SetPaused(bool paused);
  // Bytes forwarded client -> server so far (all connections).
  long long forwarded() const { return forwarded_.load(); }

 private:
  struct Chunk;
  struct Direction;
  struct Link;
  TcpRelay() = default;
  void AcceptLoop(int listen_fd);
  void Read(Link* link, Direction* d, bool upstream);
  void Write(Link* link, Direction* d, bool upstream);
  void Corrupt(Direction* d, char* data, size_t n);

  std::string netns_, listen_host_, target_host_;
  int listen_port_ = 0, target_port_ = 0;
  int wake_fd_ = -1;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<long long> delay_ms_{0};
  std::atomic<long long> forwarded_{0};
  std::atomic<int> corruptions_{0};

  std::mutex mu_;  // guards the fields below and every Direction's queue
  std::condition_variable changed_;
  bool paused_ = false;
  bool armed_ = false;
  std::string pattern_;
  size_t skip_ = 0;
  std::list<std::unique_ptr<Link>> links_;
};

}  // namespace scd::testing

#endif  // SCD_TESTS_NETFAULTS_TCP_RELAY_H_
