// The transport conformance test (docs/STYLE.md: every transport passes one shared test). Each
// check is written once against the Transport interface and instantiated for TCP ([tcp]) and
// UCX ([ucx]): byte-exact round trips up to 64 MB with their transfer tokens, 16 concurrent
// senders, a sender that dies
// mid-message (closed locally, and a child process killed with SIGKILL), a receiver that dies
// mid-message, a corrupted body caught by the checksum, dead and silent addresses, deadlines
// and back-pressure, a port already listened on, and the bandwidth cap's accuracy on the wire.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tests/transport/transport_test_util.h"

extern char** environ;

namespace scd::transport {
namespace {

using testing::AnyPort;
using testing::HoldsPattern;
using testing::In;
using testing::MakeTransport;
using testing::Pattern;
using testing::ReceiveOrFail;

// Defines the same check for both transports; the UCX copy carries the [ucx] tag.
#define TRANSPORT_CONFORMANCE(title, body_fn)                                   \
  TEST_CASE("tcp: " title, "[transport][tcp]") { body_fn(std::string("tcp")); } \
  TEST_CASE("ucx: " title, "[transport][ucx]") { body_fn(std::string("ucx")); }

// A listening transport plus a connected sender, the usual starting point.
struct Pair {
  std::unique_ptr<Transport> server;
  std::unique_ptr<Transport> client;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> connection;
};

// False (after the skip message) where UCX cannot start.
bool MakePair(const std::string& kind, Pair* pair, const TransportOptions& client_options = {},
              const TransportOptions& server_options = {}) {
  pair->server = MakeTransport(kind, server_options);
  if (pair->server == nullptr) return false;
  pair->client = MakeTransport(kind, client_options);
  REQUIRE(pair->client != nullptr);
  auto listener = pair->server->Listen(AnyPort(kind));
  INFO(listener.status().ToString());
  REQUIRE(listener.ok());
  pair->listener = std::move(*listener);
  auto connection = pair->client->Connect(pair->listener->address(), In(absl::Seconds(10)));
  INFO(connection.status().ToString());
  REQUIRE(connection.ok());
  pair->connection = std::move(*connection);
  return true;
}

void RoundTrip(const std::string& kind) {
  Pair pair;
  if (!MakePair(kind, &pair)) return;
  const std::string& address = pair.listener->address();
  CHECK(address.rfind(kind + "://127.0.0.1:", 0) == 0);
  CHECK(address != AnyPort(kind));  // the real port is reported
  CHECK(pair.connection->peer_address() == address);

  const size_t sizes[] = {0, 1, 47, 4096, (1 << 20) + 3, 64 << 20};
  uint64_t id = 100;
  for (size_t size : sizes) {
    const std::vector<uint8_t> payload = Pattern(id, size);
    const TransferToken token = NewTransferToken();
    const absl::Status sent = pair.connection->Send(id, token, payload, In(absl::Seconds(30)));
    INFO("size " << size << ": " << sent.ToString());
    REQUIRE(sent.ok());
    Message message = ReceiveOrFail(*pair.listener);
    CHECK(message.status.ok());
    CHECK(message.request_id == id);
    CHECK(message.token == token);
    CHECK(message.peer.rfind(kind + "://127.0.0.1:", 0) == 0);
    CHECK(HoldsPattern(message, id, size));
    ++id;
  }
  // A message sent without a token arrives with none (the receiver decides what that means).
  REQUIRE(pair.connection->Send(id, Pattern(id, 10), In(absl::Seconds(10))).ok());
  Message untokened = ReceiveOrFail(*pair.listener);
  CHECK_FALSE(HasToken(untokened.token));
  CHECK(pair.connection->health().ok());
}
TRANSPORT_CONFORMANCE("small and large payloads round-trip byte-exact", RoundTrip)

void ConcurrentSenders(const std::string& kind) {
  Pair pair;
  if (!MakePair(kind, &pair)) return;
  // 16 sender threads over 8 connections: concurrency across connections and several
  // messages in flight on each connection.
  constexpr int kThreads = 16, kConnections = 8, kPerThread = 6;
  std::vector<std::unique_ptr<Connection>> connections;
  connections.push_back(std::move(pair.connection));
  for (int c = 1; c < kConnections; ++c) {
    auto connection = pair.client->Connect(pair.listener->address(), In(absl::Seconds(10)));
    REQUIRE(connection.ok());
    connections.push_back(std::move(*connection));
  }
  auto size_of = [](uint64_t id) { return static_cast<size_t>((id * 7919) % (300 << 10)) + 1; };
  std::atomic<int> send_failures{0};
  std::mutex errors_mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Connection& connection = *connections[t % kConnections];
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t id = 1000 * (t + 1) + i;
        const absl::Status sent =
            connection.Send(id, Pattern(id, size_of(id)), In(absl::Seconds(30)));
        if (!sent.ok()) {
          ++send_failures;
          std::lock_guard<std::mutex> lock(errors_mu);
          errors.push_back(sent.ToString());
        }
      }
    });
  }
  std::map<uint64_t, int> seen;
  int bad_payloads = 0;
  for (int n = 0; n < kThreads * kPerThread; ++n) {
    Message message = ReceiveOrFail(*pair.listener, absl::Seconds(30));
    REQUIRE(message.status.ok());
    ++seen[message.request_id];
    if (!HoldsPattern(message, message.request_id, size_of(message.request_id))) ++bad_payloads;
  }
  for (auto& thread : threads) thread.join();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(send_failures == 0);
  CHECK(bad_payloads == 0);
  CHECK(seen.size() == static_cast<size_t>(kThreads * kPerThread));
  for (const auto& [id, count] : seen) CHECK(count == 1);
  // Nothing extra arrives: exactly once.
  CHECK(absl::IsDeadlineExceeded(pair.listener->Receive(In(absl::Milliseconds(100))).status()));
}
TRANSPORT_CONFORMANCE("16 concurrent senders: every message delivered exactly once",
                      ConcurrentSenders)

void SenderDiesMidMessage(const std::string& kind) {
  TransportOptions slow;
  slow.bandwidth_gbps = 0.4;  // 32 MB take ~0.67 s, so Close lands mid-body
  Pair pair;
  if (!MakePair(kind, &pair, slow)) return;
  const std::vector<uint8_t> payload = Pattern(77, 32 << 20);
  absl::Status sent;
  absl::Duration send_time;
  std::thread sender([&] {
    const absl::Time start = absl::Now();
    sent = pair.connection->Send(77, payload, In(absl::Seconds(20)));
    send_time = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(150));
  pair.connection->Close();
  sender.join();
  INFO("sender: " << sent.ToString());
  CHECK(!sent.ok());
  CHECK(send_time < absl::Seconds(2));
  CHECK(!pair.connection->health().ok());

  Message report = ReceiveOrFail(*pair.listener);
  INFO("receiver: " << report.status.ToString());
  CHECK(report.request_id == 77);
  CHECK(!report.status.ok());
  CHECK(report.size == 0);

  // The listener keeps serving.
  auto again = pair.client->Connect(pair.listener->address(), In(absl::Seconds(10)));
  REQUIRE(again.ok());
  REQUIRE((*again)->Send(78, Pattern(78, 1000), In(absl::Seconds(10))).ok());
  Message next = ReceiveOrFail(*pair.listener);
  CHECK(next.status.ok());
  CHECK(next.request_id == 78);
  CHECK(HoldsPattern(next, 78, 1000));
}
TRANSPORT_CONFORMANCE("a sender closed mid-message: receiver reports it, keeps serving",
                      SenderDiesMidMessage)

void ReceiverDiesMidMessage(const std::string& kind) {
  TransportOptions slow;
  slow.bandwidth_gbps = 0.4;
  Pair pair;
  if (!MakePair(kind, &pair, slow)) return;
  const std::vector<uint8_t> payload = Pattern(5, 32 << 20);
  absl::Status sent;
  absl::Duration send_time;
  std::thread sender([&] {
    const absl::Time start = absl::Now();
    sent = pair.connection->Send(5, payload, In(absl::Seconds(20)));
    send_time = absl::Now() - start;
  });
  absl::SleepFor(absl::Milliseconds(150));
  pair.listener.reset();  // the receiver goes away mid-body
  sender.join();
  INFO("sender: " << sent.ToString());
  CHECK(!sent.ok());
  CHECK(send_time < absl::Seconds(5));  // well before the 20 s deadline
  CHECK(!pair.connection->health().ok());
  // Later sends fail at once rather than hanging.
  const absl::Time start = absl::Now();
  CHECK(!pair.connection->Send(6, Pattern(6, 10), In(absl::Seconds(20))).ok());
  CHECK(absl::Now() - start < absl::Seconds(1));
}
TRANSPORT_CONFORMANCE("a receiver gone mid-message: the sender fails before its deadline",
                      ReceiverDiesMidMessage)

// The child side of the SIGKILL test: connects, reports on fd 3, then sends slowly until the
// parent kills it. Hidden; only the parent runs it.
TEST_CASE("transport peer process", "[.transport_peer]") {
  const char* kind = std::getenv("SCD_TRANSPORT_PEER_KIND");
  const char* address = std::getenv("SCD_TRANSPORT_PEER_ADDRESS");
  if (kind == nullptr || address == nullptr) return;
  TransportOptions slow;
  slow.bandwidth_gbps = 0.2;  // 32 MB take ~1.3 s
  const std::vector<uint8_t> payload = Pattern(4242, 32 << 20);
  auto transport = CreateTransport(kind, slow);
  REQUIRE(transport.ok());
  auto connection = (*transport)->Connect(address, In(absl::Seconds(10)));
  REQUIRE(connection.ok());
  REQUIRE(write(3, "connected\n", 10) == 10);
  (void)(*connection)->Send(4242, payload, In(absl::Seconds(60)));
}

void SenderProcessKilled(const std::string& kind) {
  std::unique_ptr<Transport> server = MakeTransport(kind);
  if (server == nullptr) return;
  auto listener = server->Listen(AnyPort(kind));
  REQUIRE(listener.ok());

  // Everything the child needs is built before fork; the child only dup2s and execs.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("SCD_TRANSPORT_PEER_KIND=" + kind);
  env_strings.push_back("SCD_TRANSPORT_PEER_ADDRESS=" + (*listener)->address());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", test_name = "transport peer process";
  char* argv[] = {exe.data(), test_name.data(), nullptr};
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(fds[1], 3);  // the duplicate does not inherit O_CLOEXEC
    execve(exe.c_str(), argv, envp.data());
    _exit(127);
  }
  close(fds[1]);
  pollfd ready{fds[0], POLLIN, 0};
  char line[16] = {};
  const bool connected =
      poll(&ready, 1, 20000) == 1 && read(fds[0], line, sizeof(line)) > 0 && line[0] == 'c';
  close(fds[0]);
  if (connected) absl::SleepFor(absl::Milliseconds(200));  // let the body start flowing
  kill(child, SIGKILL);
  int wait_status = 0;
  waitpid(child, &wait_status, 0);
  REQUIRE(connected);
  CHECK(WIFSIGNALED(wait_status));

  Message report = ReceiveOrFail(**listener);
  INFO("receiver: " << report.status.ToString());
  CHECK(report.request_id == 4242);
  CHECK(!report.status.ok());

  auto client = MakeTransport(kind);
  auto connection = client->Connect((*listener)->address(), In(absl::Seconds(10)));
  REQUIRE(connection.ok());
  REQUIRE((*connection)->Send(9, Pattern(9, 5000), In(absl::Seconds(10))).ok());
  Message next = ReceiveOrFail(**listener);
  CHECK(next.request_id == 9);
  CHECK(HoldsPattern(next, 9, 5000));
}
TRANSPORT_CONFORMANCE("a sender process SIGKILLed mid-message: reported, listener serves on",
                      SenderProcessKilled)

void CorruptedBody(const std::string& kind) {
  TransportOptions tampering;
  tampering.tamper_for_testing = [](uint64_t request_id, std::vector<uint8_t>& body) {
    if (request_id == 13) body[body.size() / 2] ^= 0x40;  // one bit, after the CRC was taken
  };
  Pair pair;
  if (!MakePair(kind, &pair, tampering)) return;
  const absl::Status sent = pair.connection->Send(13, Pattern(13, 100000), In(absl::Seconds(10)));
  INFO("sender: " << sent.ToString());
  CHECK(absl::IsDataLoss(sent));
  CHECK(std::string(sent.message()).find("checksum") != std::string::npos);
  Message report = ReceiveOrFail(*pair.listener);
  INFO("receiver: " << report.status.ToString());
  CHECK(report.request_id == 13);
  CHECK(absl::IsDataLoss(report.status));
  CHECK(report.size == 0);

  // The same connection carries on.
  REQUIRE(pair.connection->Send(14, Pattern(14, 100000), In(absl::Seconds(10))).ok());
  Message next = ReceiveOrFail(*pair.listener);
  CHECK(next.status.ok());
  CHECK(next.request_id == 14);
  CHECK(HoldsPattern(next, 14, 100000));
  CHECK(pair.connection->health().ok());
}
TRANSPORT_CONFORMANCE("a corrupted body is caught by the checksum; the connection carries on",
                      CorruptedBody)

// A port nobody listens on (bound once, then released).
int DeadPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t len = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len);
  close(fd);
  return ntohs(address.sin_port);
}

void DeadAndSilentAddresses(const std::string& kind) {
  std::unique_ptr<Transport> client = MakeTransport(kind);
  if (client == nullptr) return;
  const std::string dead = kind + "://127.0.0.1:" + std::to_string(DeadPort());
  absl::Time start = absl::Now();
  auto refused = client->Connect(dead, In(absl::Seconds(3)));
  INFO("dead: " << refused.status().ToString());
  CHECK(!refused.ok());
  CHECK(absl::Now() - start < absl::Seconds(3.5));

  // A socket that accepts TCP connections but never speaks the protocol.
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(silent, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(listen(silent, 16) == 0);
  socklen_t len = sizeof(address);
  getsockname(silent, reinterpret_cast<sockaddr*>(&address), &len);
  start = absl::Now();
  auto mute = client->Connect(kind + "://127.0.0.1:" + std::to_string(ntohs(address.sin_port)),
                              In(absl::Milliseconds(500)));
  const absl::Duration took = absl::Now() - start;
  close(silent);
  INFO("silent: " << mute.status().ToString());
  CHECK(!mute.ok());
  CHECK(took < absl::Seconds(1.5));
}
TRANSPORT_CONFORMANCE("connecting to a dead or silent address fails within the timeout",
                      DeadAndSilentAddresses)

void DeadlinesAndBackPressure(const std::string& kind) {
  TransportOptions small_inbox;
  small_inbox.max_inbox_messages = 1;
  Pair pair;
  if (!MakePair(kind, &pair, {}, small_inbox)) return;
  CHECK(absl::IsDeadlineExceeded(pair.listener->Receive(In(absl::Milliseconds(50))).status()));

  REQUIRE(pair.connection->Send(1, Pattern(1, 1000), In(absl::Seconds(10))).ok());
  // The inbox is full, so the receiver withholds the ACK: Send honours its deadline.
  const absl::Time start = absl::Now();
  const absl::Status second =
      pair.connection->Send(2, Pattern(2, 1000), In(absl::Milliseconds(300)));
  const absl::Duration took = absl::Now() - start;
  INFO(second.ToString());
  CHECK(absl::IsDeadlineExceeded(second));
  CHECK(took >= absl::Milliseconds(250));
  CHECK(took < absl::Seconds(1.5));
  // Both messages were transmitted in full; the second lands once there is room.
  CHECK(ReceiveOrFail(*pair.listener).request_id == 1);
  Message late = ReceiveOrFail(*pair.listener);
  CHECK(late.request_id == 2);
  CHECK(HoldsPattern(late, 2, 1000));
  CHECK(pair.connection->health().ok());

  pair.listener->Close();
  CHECK(absl::IsCancelled(pair.listener->Receive(In(absl::Seconds(1))).status()));
}
TRANSPORT_CONFORMANCE("deadlines, back-pressure from a full inbox, and Receive after Close",
                      DeadlinesAndBackPressure)

void BadArguments(const std::string& kind) {
  TransportOptions tiny;
  tiny.max_message_bytes = 1000;
  Pair pair;
  if (!MakePair(kind, &pair, tiny)) return;
  const absl::Status too_big = pair.connection->Send(1, Pattern(1, 1001), In(absl::Seconds(5)));
  CHECK(absl::IsInvalidArgument(too_big));
  CHECK(pair.connection->health().ok());  // a refused Send leaves the connection usable

  const std::string other = kind == "tcp" ? "ucx" : "tcp";
  CHECK(absl::IsInvalidArgument(pair.server->Listen(other + "://127.0.0.1:0").status()));
  CHECK(absl::IsInvalidArgument(pair.server->Listen(kind + "://127.0.0.1:99999").status()));
  CHECK(absl::IsInvalidArgument(pair.server->Listen(kind + "://127.0.0.1").status()));
  // The port is taken (UCX also logs the failed bind itself).
  CHECK(!pair.server->Listen(pair.listener->address()).ok());
  CHECK(std::string(pair.server->name()) == kind);
}
TRANSPORT_CONFORMANCE("bad addresses and oversized messages are refused", BadArguments)

// A second transport (as another daemon would) cannot listen on a port already listened on:
// the error names the address and is not INVALID_ARGUMENT (a daemon exits 1, not 2, as for a
// config mistake), and the first listener keeps its messages.
void ExclusivePort(const std::string& kind) {
  Pair pair;
  if (!MakePair(kind, &pair)) return;
  std::unique_ptr<Transport> other = MakeTransport(kind);
  REQUIRE(other != nullptr);
  const std::string& taken = pair.listener->address();
  auto second = other->Listen(taken);
  REQUIRE_FALSE(second.ok());
  CHECK_FALSE(absl::IsInvalidArgument(second.status()));
  CHECK_THAT(std::string(second.status().message()), Catch::Contains(taken));
  REQUIRE(pair.connection->Send(9, Pattern(9, 4096), In(absl::Seconds(10))).ok());
  Message m = ReceiveOrFail(*pair.listener);
  CHECK(HoldsPattern(m, 9, 4096));
}
TRANSPORT_CONFORMANCE("a port already listened on is refused, naming it", ExclusivePort)

void BandwidthCap(const std::string& kind) {
  TransportOptions capped;
  capped.bandwidth_gbps = 0.5;
  Pair pair;
  if (!MakePair(kind, &pair, capped)) return;
  std::unique_ptr<Transport> free_client = MakeTransport(kind);
  auto unpaced = free_client->Connect(pair.listener->address(), In(absl::Seconds(10)));
  REQUIRE(unpaced.ok());
  const size_t bytes = 8 << 20;
  const double pacing_s = bytes * 8 / 0.5e9;  // 134 ms on the wire
  const std::vector<uint8_t> payload = Pattern(3, bytes);
  auto timed_send = [&](Connection& connection) {
    const absl::Time start = absl::Now();
    REQUIRE(connection.Send(3, payload, In(absl::Seconds(10))).ok());
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    CHECK(HoldsPattern(ReceiveOrFail(*pair.listener), 3, bytes));
    return seconds;
  };
  // What the same message costs without a cap (checksums, copies, page faults; on a loaded
  // 2-core host this is tens of ms), so the bound below tests the pacing, not the host.
  const double baseline_s = std::min(timed_send(**unpaced), timed_send(**unpaced));

  // The cap belongs to the transport (one emulated link): two connections share it.
  auto second = pair.client->Connect(pair.listener->address(), In(absl::Seconds(10)));
  REQUIRE(second.ok());
  const std::vector<uint8_t> half = Pattern(4, bytes / 2);
  auto shared_send = [&] {
    const absl::Time start = absl::Now();
    absl::Status a, b;
    std::thread t1([&] { a = pair.connection->Send(4, half, In(absl::Seconds(10))); });
    std::thread t2([&] { b = (*second)->Send(5, half, In(absl::Seconds(10))); });
    t1.join();
    t2.join();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    // Both halves delivered (each holds Pattern 4), so the next try's receive is its own.
    for (int i = 0; i < 2; ++i) CHECK(HoldsPattern(ReceiveOrFail(*pair.listener), 4, bytes / 2));
    return seconds;
  };
  // Never faster than the cap allows (less the 256 KiB burst), on every try; and pacing adds no
  // more than the wire time +20% on top of the uncapped cost, on the best of up to three tries:
  // a loaded host only ever slows a send, so one spike is not the transport's.
  double one_s = 1e9, shared_s = 1e9;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const double one = timed_send(*pair.connection);
    const double shared = shared_send();
    CHECK(one >= 0.8 * pacing_s);
    CHECK(shared >= 0.8 * pacing_s);
    one_s = std::min(one_s, one);
    shared_s = std::min(shared_s, shared);
    if (one_s <= 1.2 * pacing_s + baseline_s && shared_s <= 1.2 * pacing_s + baseline_s) break;
  }
  WARN(kind << " at 0.5 Gbit/s: 8 MiB in " << one_s * 1e3 << " ms, 2 x 4 MiB in " << shared_s * 1e3
            << " ms; pacing alone " << pacing_s * 1e3 << " ms, uncapped send " << baseline_s * 1e3
            << " ms");
  CHECK(one_s <= 1.2 * pacing_s + baseline_s);
  CHECK(shared_s <= 1.2 * pacing_s + baseline_s);
}
TRANSPORT_CONFORMANCE("the bandwidth cap holds on the wire within 20%", BandwidthCap)

}  // namespace
}  // namespace scd::transport
