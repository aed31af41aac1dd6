// Shared pieces of the network and process fault tests: daemon configs for the
// NetnsLab topology, request bodies, how a client-side outcome is classified, bounded
// waiting, and access to a decode daemon's HTTP port inside its namespace.
//
// Addresses and ports are fixed: every daemon has a namespace to itself, so nothing else can
// hold them, and a restarted daemon comes back where its peers expect it.
//   prefill ns:  HTTP 127.0.0.1:8000, gRPC (control plane) 0.0.0.0:7000,
//                relays on 10.77.<i>.1:71xx (tcp_relay.h)
//   decode ns i: Decode gRPC 10.77.<i>.2:7001, data plane 10.77.<i>.2:7002,
//                HTTP 127.0.0.1:7003 (reached with RunInNetns)
// Timeouts are short so the suite stays fast, but every assertion keeps a margin for a
// loaded two-core CI machine: keepalive 1 s + 2 s, data-plane peer timeout 3 s, lease 1 s,
// request deadline 30 s.
#ifndef SCD_TESTS_NETFAULTS_NETFAULTS_SUPPORT_H_
#define SCD_TESTS_NETFAULTS_NETFAULTS_SUPPORT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/daemons/daemon_harness.h"
#include "tests/netfaults/netns_lab.h"

// In a TEST_CASE: the lab with `decode_count` decode namespaces, the calling thread moved
// into its prefill namespace for the rest of the case; or a WARN saying why namespaces are
// unavailable and a return (ctest then reports the binary as Skipped, tests/CMakeLists.txt).
#define NETFAULTS_LAB(lab, decode_count)                                  \
  std::string lab##_why;                                                  \
  std::unique_ptr<::scd::testing::NetnsLab> lab =                         \
      ::scd::testing::NetnsLab::Create(decode_count, &lab##_why);         \
  if (lab == nullptr) {                                                   \
    WARN("SKIPPED: network namespaces are not available: " << lab##_why); \
    return;                                                               \
  }                                                                       \
  ::scd::testing::ScopedNetns lab##_entered(lab->prefill_ns());           \
  REQUIRE(lab##_entered.ok())

namespace scd::testing {

inline constexpr int kPrefillHttpPort = 8000;
inline constexpr int kPrefillGrpcPort = 7000;
inline constexpr int kDecodeRpcPort = 7001;
inline constexpr int kDecodeDataPort = 7002;
inline constexpr int kDecodeHttpPort = 7003;
inline constexpr double kRequestTimeoutS = 30;

// The prefill daemon of the lab (run it in lab.prefill_ns()).
nlohmann::json LabPrefillConfig();
// Decode daemon i, registering over link i; instance id "decode-<i>".
nlohmann::json LabDecodeConfig(int i);

// A /v1/completions body; greedy, so every replica answers a prompt with the same text.
std::string CompletionBody(const std::string& prompt, int max_tokens, bool stream);
// A prompt of about `tokens` tokens (bAbI-style story lines), distinct per `variant`.
std::string LongPrompt(int tokens, int variant = 0);

// What one request came to, from the client's side.
struct Outcome {
  int status = 0;     // HTTP status; 0: no response at all
  int finishes = 0;   // chunks carrying a finish_reason
  int errors = 0;     // error events (stream) or error bodies (non-stream)
  bool done = false;  // the stream's [DONE]
  std::string text;   // generated text
  std::string error;  // the first error message
  bool completed() const { return status == 200 && finishes == 1 && errors == 0; }
  bool failed_clearly() const { return errors == 1 && finishes == 0 && !error.empty(); }
};
Outcome Classify(const SseResult& stream);
Outcome Classify(const HttpResult& response);

// Polls `condition` every 50 ms for up to `timeout`; the seconds it took, or nullopt.
std::optional<double> WaitFor(const std::function<bool()>& condition,
                              std::chrono::milliseconds timeout);
double SecondsSince(std::chrono::steady_clock::time_point t);

// Decode daemon i's HTTP endpoints, from inside its namespace (works while its link is down).
int DecodeReadyStatus(const NetnsLab& lab, int i);
// Whether decode daemons 1..n all answer /ready with `status`.
bool AllDecodeReady(const NetnsLab& lab, int n, int status = 200);
std::optional<double> DecodeMetric(const NetnsLab& lab, int i, const std::string& series);
// A prefill metric (the caller is in the prefill namespace).
std::optional<double> PrefillMetric(const std::string& series);

// How many log lines of `process` have "event" == `event`.
int CountEvents(DaemonProcess& process, const std::string& event);

// SIGTERM to every process, then CHECKs that each exits 0 within the drain budget plus a
// margin: no daemon hangs after the faults. Returns the slowest exit in seconds.
double StopAllAndCheck(const std::vector<DaemonProcess*>& processes);

// One measured figure, printed as "[netfaults] <name> = <value> <unit>" for the results page.
void Report(const std::string& name, double value, const std::string& unit);
// A message worth quoting (an error a client or operator sees), printed the same way.
void ReportText(const std::string& name, const std::string& text);

}  // namespace scd::testing

#endif  // SCD_TESTS_NETFAULTS_NETFAULTS_SUPPORT_H_
