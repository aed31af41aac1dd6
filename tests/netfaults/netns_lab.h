// NetnsLab: a small network built from Linux network namespaces on this machine, for fault
// tests that pull links and degrade them. One namespace holds the prefill daemon;
// each decode daemon gets its own, joined to the prefill namespace by a veth pair:
//
//     prefill ns  vd<i> 10.77.<i>.1/24  <== veth ==>  eth0 10.77.<i>.2/24  decode ns <i>
//
// Nothing is added to the host's own namespace (no address, route or interface), so the lab
// cannot disturb the machine or another run. Namespace names carry the test's pid and are
// deleted by the destructor (also when a REQUIRE fails); leftovers of runs that were killed
// are swept on the next Create. Faults: link down/up (`ip link`), random loss (nftables,
// `numgen random`), a rate limit (`tc ... tbf`). There is no netem: this kernel lacks
// sch_netem, so latency comes from TcpRelay (tcp_relay.h) instead.
//
// ScopedNetns moves the calling thread into a namespace until it goes out of scope; threads
// and processes it starts inherit the namespace, so the test body talks to the prefill
// daemon on 127.0.0.1 exactly as tests/daemons does. RunInNetns runs one function on a
// thread inside another namespace (a decode daemon's /ready and /metrics).
#ifndef SCD_TESTS_NETFAULTS_NETNS_LAB_H_
#define SCD_TESTS_NETFAULTS_NETNS_LAB_H_

#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace scd::testing {

class ScopedNetns {
 public:
  // Enters /run/netns/<name>; ok() says whether it worked (error() says why not).
  explicit ScopedNetns(const std::string& name);
  ~ScopedNetns();  // back to the namespace the thread was in
  ScopedNetns(const ScopedNetns&) = delete;
  ScopedNetns& operator=(const ScopedNetns&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

 private:
  int saved_ = -1;
  bool ok_ = false;
  std::string error_;
};

// Runs `fn` on a new thread inside namespace `name` and returns its result (a
// default-constructed one when the namespace cannot be entered).
template <typename Fn>
auto RunInNetns(const std::string& name, Fn fn) -> decltype(fn()) {
  using Result = decltype(fn());
  Result result{};
  std::thread([&] {
    ScopedNetns in(name);
    if (in.ok()) result = fn();
  }).join();
  return result;
}

class NetnsLab {
 public:
  // The prefill namespace and `decode_count` decode namespaces with their links, all up.
  // Null with *why set when the machine does not allow it (no `ip`, no CAP_NET_ADMIN).
  static std::unique_ptr<NetnsLab> Create(int decode_count, std::string* why);
  ~NetnsLab();  // deletes every namespace (and with them the veth pairs)
  NetnsLab(const NetnsLab&) = delete;
  NetnsLab& operator=(const NetnsLab&) = delete;

  const std::string& prefill_ns() const { return prefill_ns_; }
  const std::string& decode_ns(int i) const { return decode_ns_.at(i - 1); }  // i = 1..n
  // The two ends of link i.
  static std::string PrefillSide(int i);  // "10.77.<i>.1", in the prefill namespace
  static std::string DecodeSide(int i);   // "10.77.<i>.2", in decode namespace i

  // Each returns "" on success, else the failed command and its output.
  // Administrative down/up of the decode end (eth0 in decode ns i): the decode daemon loses
  // its route, and the prefill end loses carrier, so both directions go dark.
  std::string SetLink(int i, bool up);
  // Drops `percent` % of the IP packets entering and leaving eth0 of decode ns i (0: none;
  // 100: a blackhole, while ARP still answers).
  std::string SetLoss(int i, int percent);
  // Packets the loss rules of decode ns i dropped so far (-1 when unknown).
  long DroppedPackets(int i);
  // Token-bucket rate limit on the prefill end of link i (prefill -> decode), e.g. "96kbit";
  // empty removes it.
  std::string SetRate(int i, const std::string& rate);

  // Whether `tool` (e.g. "nft") can be run; tests that need it skip with a message otherwise.
  static bool HaveTool(const std::string& tool);

 private:
  NetnsLab() = default;
  std::string Run(const std::string& command);

  std::string prefill_ns_;
  std::vector<std::string> decode_ns_;
  std::vector<bool> loss_table_;
};

}  // namespace scd::testing

#endif  // SCD_TESTS_NETFAULTS_NETNS_LAB_H_
