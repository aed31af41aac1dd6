// See daemon_process.h.
#include "common/tools/cluster/daemon_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace scd::cluster {

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(const std::string& binary,
                                                                    std::vector<std::string> args,
                                                                    std::string log_path,
                                                                    const std::string& netns) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(binary, " is not an executable (build it first)"));
  }
  std::vector<std::string> all = {binary};
  for (auto& a : args) all.push_back(std::move(a));
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string netns_path = netns.empty() ? "" : "/run/netns/" + netns;
  // Emptied here, before the fork: a caller that reads the log for the daemon's start-up event
  // must not find an earlier run's in the moment before the child opens it.
  if (const int old_log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      old_log >= 0) {
    close(old_log);
  }
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = open("/dev/null", O_WRONLY);
    if (log < 0 || null < 0) _exit(127);
    dup2(log, STDERR_FILENO);
    dup2(null, STDOUT_FILENO);
    if (!netns_path.empty()) {
      const int ns = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
      if (ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
        dprintf(STDERR_FILENO, "cannot enter network namespace %s: %s\n", netns_path.c_str(),
                std::strerror(errno));
        _exit(127);
      }
      close(ns);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return std::unique_ptr<DaemonProcess>(new DaemonProcess(pid, std::move(log_path)));
}

DaemonProcess::~DaemonProcess() {
  if (running()) {
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

std::vector<nlohmann::json> DaemonProcess::LogLines() const {
  std::vector<nlohmann::json> lines;
  std::ifstream in(log_path_);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) lines.push_back(std::move(j));
  }
  return lines;
}

std::string DaemonProcess::LogText() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DaemonProcess::LogTail(size_t bytes) const {
  std::string text = LogText();
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

absl::StatusOr<nlohmann::json> DaemonProcess::WaitForEvent(const std::string& event,
                                                           std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    for (nlohmann::json& j : LogLines()) {
      if (j.value("event", "") == event) return j;
    }
    if (!running()) {
      return absl::FailedPreconditionError(absl::StrCat("process ", pid_, " exited (",
                                                        exit_code_.value_or(-1), ") before '",
                                                        event, "'; log tail:\n", LogTail()));
    }
    if (std::chrono::steady_clock::now() > until) {
      return absl::DeadlineExceededError(
          absl::StrCat("no '", event, "' from process ", pid_, "; log tail:\n", LogTail()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void DaemonProcess::Signal(int sig) {
  if (pid_ > 0 && !exit_code_) kill(pid_, sig);
}

bool DaemonProcess::running() {
  if (exit_code_ || pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    return false;
  }
  return true;
}

std::optional<int> DaemonProcess::Wait(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() > until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return exit_code_;
}

std::optional<int> DaemonProcess::Stop(std::chrono::milliseconds timeout) {
  Signal(SIGTERM);
  std::optional<int> rc = Wait(timeout);
  if (!rc) {
    Signal(SIGKILL);
    rc = Wait(std::chrono::seconds(10));
  }
  return rc;
}

namespace {

// Whether `port` can be bound on 127.0.0.1 right now.
bool CanBind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

absl::StatusOr<int> PickFreePort() {
  // Below the kernel's ephemeral range: a client connecting to a port inside that range while
  // nothing listens can be handed that very port as its local port and connect to itself (TCP
  // simultaneous open), which wedges a control-plane channel across daemon restarts.
  int low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  range >> low;
  const int lo = 10000, hi = std::max(lo + 100, low - 1);
  std::random_device rd;
  std::mt19937 rng(rd());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo));
    if (CanBind(port)) return port;
  }
  return absl::UnavailableError(absl::StrCat("no free port in [", lo, ", ", hi, ")"));
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& config) {
  std::ofstream out(path);
  out << config.dump(2) << "\n";
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace scd::cluster
