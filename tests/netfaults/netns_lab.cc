// See netns_lab.h.
#include "tests/netfaults/netns_lab.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tests/daemons/daemon_harness.h"

namespace scd::testing {
namespace {

constexpr char kPrefix[] = "scdnf-";

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Namespaces of earlier runs whose test process is gone ("scdnf-<pid>-...").
void SweepLeftovers() {
  DIR* dir = opendir("/run/netns");
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + sizeof(kPrefix) - 1));
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  closedir(dir);
  std::string out;
  for (const std::string& name : stale) RunCommand("ip netns del " + name, &out);
}

}  // namespace

ScopedNetns::ScopedNetns(const std::string& name) {
  saved_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (saved_ < 0) {
    error_ = Errno("open /proc/thread-self/ns/net");
    return;
  }
  const std::string path = "/run/netns/" + name;
  const int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) {
    error_ = Errno("open " + path);
    return;
  }
  if (setns(target, CLONE_NEWNET) != 0) {
    error_ = Errno("setns " + path);
  } else {
    ok_ = true;
  }
  close(target);
}

ScopedNetns::~ScopedNetns() {
  if (saved_ < 0) return;
  if (ok_) setns(saved_, CLONE_NEWNET);
  close(saved_);
}

std::string NetnsLab::PrefillSide(int i) { return "10.77." + std::to_string(i) + ".1"; }
std::string NetnsLab::DecodeSide(int i) { return "10.77." + std::to_string(i) + ".2"; }

bool NetnsLab::HaveTool(const std::string& tool) {
  std::string out;
  return RunCommand("command -v " + tool, &out) == 0;
}

std::string NetnsLab::Run(const std::string& command) {
  std::string out;
  if (RunCommand(command, &out) == 0) return "";
  return "`" + command + "` failed: " + out;
}

std::unique_ptr<NetnsLab> NetnsLab::Create(int decode_count, std::string* why) {
  if (!HaveTool("ip")) {
    *why = "the `ip` tool (iproute2) is not installed";
    return nullptr;
  }
  SweepLeftovers();
  std::unique_ptr<NetnsLab> lab(new NetnsLab());
  const std::string base = kPrefix + std::to_string(getpid()) + "-";
  lab->prefill_ns_ = base + "p";
  // The first `ip netns add` tells whether the machine allows namespaces at all.
  if (std::string err = lab->Run("ip netns add " + lab->prefill_ns_); !err.empty()) {
    *why =
        "cannot create a network namespace (needs root or CAP_SYS_ADMIN + CAP_NET_ADMIN): " + err;
    lab->prefill_ns_.clear();
    return nullptr;
  }
  std::vector<std::string> steps = {"ip -n " + lab->prefill_ns_ + " link set lo up"};
  for (int i = 1; i <= decode_count; ++i) {
    const std::string ns = base + "d" + std::to_string(i);
    const std::string p_if = "vd" + std::to_string(i);
    if (std::string err = lab->Run("ip netns add " + ns); !err.empty()) {
      *why = err;
      return nullptr;
    }
    lab->decode_ns_.push_back(ns);
    lab->loss_table_.push_back(false);
    // Both ends are created directly inside their namespaces: no name is ever taken in the
    // host namespace.
    steps.push_back("ip link add " + p_if + " netns " + lab->prefill_ns_ +
                    " type veth peer name eth0 netns " + ns);
    steps.push_back("ip -n " + lab->prefill_ns_ + " addr add " + PrefillSide(i) + "/24 dev " +
                    p_if);
    steps.push_back("ip -n " + ns + " addr add " + DecodeSide(i) + "/24 dev eth0");
    steps.push_back("ip -n " + ns + " link set lo up");
    steps.push_back("ip -n " + lab->prefill_ns_ + " link set " + p_if + " up");
    steps.push_back("ip -n " + ns + " link set eth0 up");
  }
  for (const std::string& step : steps) {
    if (std::string err = lab->Run(step); !err.empty()) {
      *why = err;
      return nullptr;
    }
  }
  return lab;
}

NetnsLab::~NetnsLab() {
  std::string out;
  for (const std::string& ns : decode_ns_) RunCommand("ip netns del " + ns, &out);
  if (!prefill_ns_.empty()) RunCommand("ip netns del " + prefill_ns_, &out);
}

std::string NetnsLab::SetLink(int i, bool up) {
  return Run("ip -n " + decode_ns(i) + " link set eth0 " + (up ? "up" : "down"));
}

std::string NetnsLab::SetLoss(int i, int percent) {
  const std::string nft = "ip netns exec " + decode_ns(i) + " nft ";
  if (loss_table_[i - 1]) {
    if (std::string err = Run(nft + "delete table inet scdnf"); !err.empty()) return err;
    loss_table_[i - 1] = false;
  }
  if (percent <= 0) return "";
  const std::string drop =
      percent >= 100 ? std::string(" counter drop")
                     : " numgen random mod 100 '<' " + std::to_string(percent) + " counter drop";
  const std::vector<std::string> steps = {
      nft + "add table inet scdnf",
      nft + "add chain inet scdnf in '{ type filter hook input priority 0; }'",
      nft + "add chain inet scdnf out '{ type filter hook output priority 0; }'",
      nft + "add rule inet scdnf in iifname eth0" + drop,
      nft + "add rule inet scdnf out oifname eth0" + drop,
  };
  for (const std::string& step : steps) {
    if (std::string err = Run(step); !err.empty()) return err;
    loss_table_[i - 1] = true;
  }
  return "";
}

long NetnsLab::DroppedPackets(int i) {
  std::string out;
  if (RunCommand("ip netns exec " + decode_ns(i) + " nft list table inet scdnf", &out) != 0)
    return -1;
  long total = 0;
  for (size_t at = out.find("packets "); at != std::string::npos;
       at = out.find("packets ", at + 1)) {
    total += std::atol(out.c_str() + at + 8);
  }
  return total;
}

std::string NetnsLab::SetRate(int i, const std::string& rate) {
  const std::string dev = " dev vd" + std::to_string(i);
  const std::string tc = "tc -n " + prefill_ns_ + " qdisc ";
  if (rate.empty()) return Run(tc + "del" + dev + " root");
  // A small bucket and queue: packets beyond ~0.5 s of backlog are dropped and TCP paces to
  // the rate, as on a real slow link.
  return Run(tc + "replace" + dev + " root tbf rate " + rate + " burst 3000 latency 500ms");
}

}  // namespace scd::testing
