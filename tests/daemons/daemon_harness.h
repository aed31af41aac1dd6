// Integration-test harness: starts the real scd-prefill and scd-decode binaries on loopback
// (ports chosen by the daemons, read back from their structured start-up log lines), talks to
// them over HTTP, SSE and gRPC, and kills or stops them. Every wait is bounded, so a daemon
// that hangs fails the test instead of hanging CI.
#ifndef SCD_TESTS_DAEMONS_DAEMON_HARNESS_H_
#define SCD_TESTS_DAEMONS_DAEMON_HARNESS_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/rpc/credentials.h"
#include "common/tools/cluster/daemon_process.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/scd.grpc.pb.h"

namespace scd::testing {

// The specialist the harness configures (PrefillConfig, DecodeConfig).
inline constexpr char kModel[] = "stories260K-babi-qa";

// Paths of the built binaries and the fixtures.
std::string BinaryPath(const std::string& name);  // build/bin/<name>
std::string ModelDir(const std::string& name);    // ../shared/models/<name>
std::string ArtifactPath();                       // the bundled pair's calibration artifact

// One daemon process; stderr (its JSON log) goes to a file (common/tools/cluster, shared with the
// benchmark drivers).
using DaemonProcess = cluster::DaemonProcess;

// Starts `binary` with `args`, inside network namespace `netns` when given; fails the test if
// it cannot be started.
std::unique_ptr<DaemonProcess> Spawn(const std::string& binary, std::vector<std::string> args,
                                     const std::string& log_path, const std::string& netns = "");

// Writes `config` to `dir`/`tag`.json, runs build/bin/`binary` on it (in `netns` when given)
// until it exits by itself, up to 60 s: its exit code (nullopt if it was still running, and
// then killed) and, in `log`, its whole log.
std::optional<int> RunToExit(const std::string& binary, const std::string& dir,
                             const nlohmann::json& config, const std::string& tag, std::string* log,
                             const std::string& netns = "");

// Writes `config` as JSON to `path`.
void WriteJson(const std::string& path, const nlohmann::json& config);

// A prefill daemon config for the bundled pair with free ports; `mode` for the specialist.
nlohmann::json PrefillConfig(const std::string& mode = "scd");
// A decode daemon config for the bAbI specialist registering at `control_plane`.
nlohmann::json DecodeConfig(const std::string& control_plane);

// A running prefill daemon with the addresses read from its log.
struct PrefillHandle {
  std::unique_ptr<DaemonProcess> process;
  int http_port = 0;
  std::string grpc_address;
};
struct DecodeHandle {
  std::unique_ptr<DaemonProcess> process;
  int http_port = -1;
  std::string instance_id;
};
// Starts a daemon from `config` (written under `dir`), inside network namespace `netns` when
// given; fails the test if it does not start.
PrefillHandle StartPrefill(const std::string& dir, const nlohmann::json& config,
                           const std::string& tag = "prefill", const std::string& netns = "");
DecodeHandle StartDecode(const std::string& dir, const nlohmann::json& config,
                         const std::string& tag = "decode", const std::string& netns = "");

// Minimal HTTP/1.1 client calls against 127.0.0.1:port.
struct HttpResult {
  int status = 0;  // 0: no response (connection error or timeout)
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};
HttpResult HttpGet(int port, const std::string& path,
                   std::chrono::seconds timeout = std::chrono::seconds(10));
HttpResult HttpPost(int port, const std::string& path, const std::string& body,
                    const std::map<std::string, std::string>& headers = {},
                    std::chrono::seconds timeout = std::chrono::seconds(30));

// A streaming POST whose SSE `data:` payloads are collected; `on_event` may return false to
// disconnect mid-stream.
struct SseResult {
  int status = 0;
  std::vector<std::string> events;  // data payloads, "[DONE]" included
  std::string body;                 // the raw body when the status is not 200
  bool done() const { return !events.empty() && events.back() == "[DONE]"; }
  // The concatenated choices[0].delta.content (chat) or choices[0].text (completions).
  std::string Text() const;
};
SseResult HttpStream(int port, const std::string& path, const std::string& body,
                     const std::function<bool(const std::string&)>& on_event = nullptr,
                     std::chrono::seconds timeout = std::chrono::seconds(60));

// Waits until GET /ready answers `status` (up to `timeout`).
bool WaitForReady(int port, int status, std::chrono::milliseconds timeout);
// A metric sample's value from a Prometheus text exposition ("name{labels}" exactly as
// rendered, or a bare name); nullopt when absent.
std::optional<double> MetricValue(const std::string& exposition, const std::string& series);
// The same sample scraped from the daemon's GET /metrics on `http_port`.
std::optional<double> ScrapeMetric(int http_port, const std::string& series);
// The "error" object of an OpenAI-style error body; null when it has none.
nlohmann::json ErrorOf(const std::string& body);
// Runs a shell command (testing::RunCommand); its exit code, and its output appended to
// *output.
int RunCommand(const std::string& command, std::string* output);

// A gRPC Generate call to a prefill daemon: the status, the streamed text, every event, and
// the request id from the initial metadata (30 s deadline).
struct GrpcOutcome {
  grpc::Status status;
  std::string text;
  std::vector<scd::v1::GenerateEvent> events;
  std::string request_id;
};
GrpcOutcome GrpcGenerate(const std::string& address, const scd::v1::GenerateRequest& request);

// A Decode.Generate call straight to a decode daemon over `channel` (its stream read to the
// end, 20 s deadline): the call's status.
grpc::Status CallDecode(const std::string& address, const rpc::ChannelOptions& channel,
                        const scd::v1::DecodeRequest& request);

}  // namespace scd::testing

#endif  // SCD_TESTS_DAEMONS_DAEMON_HARNESS_H_
