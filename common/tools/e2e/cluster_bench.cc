// See cluster_bench.h.
#include "common/tools/e2e/cluster_bench.h"

#include <httplib.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/http/sse.h"
#include "common/tools/cluster/daemon_process.h"
#include "common/tools/cluster/etcd_cluster.h"
#include "common/tools/cluster/local_cluster.h"
#include "common/tools/loadgen/runner.h"
#include "common/tools/loadgen/stats.h"

namespace scd::e2e {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
constexpr char kToken[] = "cluster-bench-token";
constexpr int kMaxExamples = 3;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string Fmt(double v, int digits = 1) { return absl::StrFormat("%.*f", digits, v); }

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

// The CPUs this process may run on, as nproc counts them.
int Nproc() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return in ? absl::StrCat(one, " ", five, " ", fifteen) : "unknown";
}

// A bAbI-style story of `lines` moves and its question; `variant` picks names and places, so
// that prompts differ from their first sentence on.
std::string StoryPrompt(int variant, int lines) {
  static const char* kNames[] = {"Mary", "John", "Sandra", "Daniel"};
  static const char* kPlaces[] = {"garden", "office", "kitchen", "hallway", "bedroom", "bathroom"};
  std::string text;
  for (int line = 0; line < lines; ++line) {
    absl::StrAppend(&text, kNames[(line + variant) % 4], " went to the ",
                    kPlaces[(line * 5 + variant * 3) % 6], ". ");
  }
  return absl::StrCat(text, "Where is ", kNames[variant % 4], "?");
}

std::string GreedyBody(const std::string& model, const std::string& prompt, int max_tokens) {
  nlohmann::json j = {{"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens}};
  j["temperature"] = 0;
  j["stream"] = true;
  return j.dump();
}

// ---- One stream, judged from its SSE events ----

struct StreamOutcome {
  int status = 0;     // 0: no response
  int finishes = 0;   // chunks with a finish_reason
  int errors = 0;     // error events, or an error body
  int dones = 0;      // `data: [DONE]`
  std::string text;   // choices[0].text, joined
  std::string error;  // the first error's message
  std::string transport_error;
  bool completed() const { return status == 200 && finishes == 1 && errors == 0; }
};

void AbsorbEvent(const std::string& data, StreamOutcome& out,
                 const std::function<void()>& on_token) {
  if (data == http::kSseDonePayload) {
    ++out.dones;
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded()) return;
  if (j.contains("error")) {
    if (++out.errors == 1) {
      out.error = j["error"].is_object() ? j["error"].value("message", "?") : "?";
    }
    return;
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
  const nlohmann::json& c = j["choices"][0];
  if (c.contains("text") && c["text"].is_string()) {
    const std::string piece = c["text"].get<std::string>();
    if (!piece.empty() && out.text.empty() && on_token) on_token();
    out.text += piece;
  }
  if (c.contains("finish_reason") && c["finish_reason"].is_string()) ++out.finishes;
}

// POSTs `body` to /v1/completions and reads the stream to its end. `on_token` runs once, at
// the first non-empty text.
StreamOutcome StreamCompletion(int port, const std::string& body,
                               const std::function<void()>& on_token, int timeout_s) {
  StreamOutcome out;
  http::SseParser parser;
  std::string error_body;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.status != 200) {
      error_body.append(data, std::min<size_t>(n, 4096));
      return true;
    }
    for (const std::string& e : parser.Feed(std::string_view(data, n))) {
      AbsorbEvent(e, out, on_token);
    }
    return true;
  };
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(false);
  client.set_connection_timeout(seconds(5));
  client.set_read_timeout(seconds(timeout_s));
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  client.send(req, res, error);
  if (error != httplib::Error::Success) out.transport_error = httplib::to_string(error);
  if (out.status != 0 && out.status != 200) AbsorbEvent(error_body, out, nullptr);
  return out;
}

std::string Describe(const StreamOutcome& s) {
  if (s.errors > 0 && s.finishes == 0) {
    return absl::StrCat(s.status == 200 ? "error event: " : absl::StrCat("HTTP ", s.status, ": "),
                        s.error.substr(0, 200));
  }
  return absl::StrCat("HTTP ", s.status, ", ", s.finishes, " finish, ", s.errors, " error, ",
                      s.dones, " [DONE], ", s.text.size(), " bytes of text",
                      s.transport_error.empty() ? "" : ", client: " + s.transport_error);
}

void Count(const StreamOutcome& s, const std::string& reference, StreamRound& round) {
  std::string example;
  if (s.finishes + s.errors > 1 || s.dones > 1) {
    ++round.duplicated;
    example = "duplicated: " + Describe(s);
  } else if (s.completed()) {
    ++(s.text == reference ? round.identical : round.different_text);
  } else if (s.errors == 1) {
    ++round.errors;
    example = Describe(s);
  } else {
    ++round.lost;
    example = "lost: " + Describe(s);
  }
  if (!example.empty() && round.examples.size() < kMaxExamples &&
      std::find(round.examples.begin(), round.examples.end(), example) == round.examples.end()) {
    round.examples.push_back(std::move(example));
  }
}

// ---- /metrics and logs ----

absl::StatusOr<std::string> FetchMetrics(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(seconds(2));
  client.set_read_timeout(seconds(5));
  httplib::Result r = client.Get("/metrics");
  if (!r) return absl::UnavailableError("GET /metrics: " + httplib::to_string(r.error()));
  if (r->status != 200) return absl::UnavailableError(absl::StrCat("/metrics: ", r->status));
  return r->body;
}

// The value of the sample `series` (name and labels exactly as exposed); 0 when absent.
double SampleValue(const std::string& exposition, const std::string& series) {
  for (size_t pos = exposition.find(series); pos != std::string::npos;
       pos = exposition.find(series, pos + 1)) {
    const size_t end = pos + series.size();
    if ((pos == 0 || exposition[pos - 1] == '\n') && end < exposition.size() &&
        exposition[end] == ' ') {
      return std::strtod(exposition.c_str() + end + 1, nullptr);
    }
  }
  return 0;
}

// The log line of `event` about `instance`, if logged yet.
std::optional<nlohmann::json> Logged(const cluster::DaemonProcess& p, const std::string& event,
                                     const std::string& instance) {
  for (nlohmann::json& line : p.LogLines()) {
    if (line.value("event", "") == event && line.value("instance_id", "") == instance) return line;
  }
  return std::nullopt;
}

// Milliseconds from `origin` to the line's time stamp (the daemon's wall clock, 1 ms steps).
absl::StatusOr<double> StampMs(const nlohmann::json& line, absl::Time origin) {
  absl::Time t;
  std::string why;
  if (!absl::ParseTime(absl::RFC3339_full, line.value("ts", ""), &t, &why)) {
    return absl::InternalError(
        absl::StrCat("unreadable log time stamp in ", line.dump(), ": ", why));
  }
  return absl::ToDoubleMilliseconds(t - origin);
}

// Polls every 10 ms until every condition has held once; for each, the milliseconds from `t0`
// to the poll that first saw it. DeadlineExceeded naming `what` after `timeout`;
// FailedPrecondition when `must_run` (if any) exits meanwhile.
absl::StatusOr<std::vector<double>> PollUntil(const std::vector<std::function<bool()>>& conditions,
                                              Clock::time_point t0, milliseconds timeout,
                                              const std::string& what,
                                              cluster::DaemonProcess* must_run = nullptr) {
  std::vector<double> seen(conditions.size(), -1);
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < conditions.size(); ++i) {
      if (seen[i] < 0 && conditions[i]()) seen[i] = MsSince(t0);
      all = all && seen[i] >= 0;
    }
    if (all) return seen;
    if (must_run != nullptr && !must_run->running()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the daemon exited; log tail:\n", must_run->LogTail()));
    }
    if (Clock::now() - t0 > timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": not within ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
}

void StopAll(std::vector<std::unique_ptr<cluster::DaemonProcess>>& daemons) {
  for (auto& d : daemons) d->Signal(SIGTERM);
  for (auto& d : daemons) d->Stop(seconds(10));
}

// ---- 1. kill -9 under streams, on the embedded registry ----

struct EmbeddedCluster {
  std::vector<std::unique_ptr<cluster::DaemonProcess>> daemons;  // prefill, decode-1, decode-2
  int http_port = 0;
  ~EmbeddedCluster() { StopAll(daemons); }
};

nlohmann::json EmbeddedPrefillJson(const ClusterBenchOptions& o, const std::string& grpc,
                                   int migration_limit) {
  nlohmann::json c;
  c["base_model"] = o.base_model;
  c["http"] = {{"host", "127.0.0.1"}, {"port", 0}};
  c["grpc"] = {{"listen", grpc}};
  c["control_plane"] = {{"cluster_token", kToken}};
  c["limits"] = {
      {"max_tokens", 256}, {"request_timeout", "60s"}, {"migration_limit", migration_limit}};
  c["drain_timeout"] = "5s";
  c["specialists"] = nlohmann::json::array({{{"name", o.specialist_name},
                                             {"artifact", o.artifact},
                                             {"consumer_path", o.specialist_model},
                                             {"mode", "scd"},
                                             {"chat_template", "plain"}}});
  return c;
}

cluster::DecodeDaemonSpec DecodeSpec(const ClusterBenchOptions& o) {
  cluster::DecodeDaemonSpec spec;
  spec.model_name = o.specialist_name;
  spec.model_path = o.specialist_model;
  spec.artifact = o.artifact;
  spec.cluster_token = kToken;
  spec.drain_timeout = "5s";
  return spec;
}

absl::Status StartEmbedded(const ClusterBenchOptions& o, int limit, const std::string& dir,
                           EmbeddedCluster& c) {
  SCD_ASSIGN_OR_RETURN(const int grpc_port, cluster::PickFreePort());
  const std::string grpc = absl::StrCat("127.0.0.1:", grpc_port);
  SCD_ASSIGN_OR_RETURN(cluster::StartedPrefill prefill,
                       cluster::StartPrefillDaemon(o.bin_dir, EmbeddedPrefillJson(o, grpc, limit),
                                                   dir, "prefill", seconds(120)));
  c.daemons.push_back(std::move(prefill.process));
  c.http_port = prefill.http_port;
  cluster::DecodeDaemonSpec spec = DecodeSpec(o);
  spec.control_plane = grpc;
  std::vector<std::unique_ptr<cluster::DaemonProcess>> decodes;
  for (int i = 1; i <= 2; ++i) {
    nlohmann::json config = cluster::DecodeDaemonJson(spec, i);
    config["engine"] = {{"min_step_interval", o.kill_step_interval}};
    SCD_ASSIGN_OR_RETURN(auto decode, cluster::StartWithConfig(o.bin_dir + "/scd-decode", config,
                                                               dir, absl::StrCat("decode-", i)));
    decodes.push_back(std::move(decode));
  }
  absl::Status ready = cluster::WaitForDecodeInstances(c.http_port, o.specialist_name,
                                                       *c.daemons[0], decodes, seconds(120));
  for (auto& d : decodes) c.daemons.push_back(std::move(d));
  return ready;
}

// One stream per prompt in turn, undisturbed: the texts every later stream is judged by.
absl::StatusOr<std::vector<std::string>> ReferenceTexts(const ClusterBenchOptions& o, int port) {
  std::vector<std::string> refs;
  for (int v = 0; v < o.distinct_prompts; ++v) {
    const StreamOutcome s = StreamCompletion(
        port, GreedyBody(o.specialist_name, StoryPrompt(v, 3), o.stream_tokens), nullptr, 60);
    if (!s.completed()) {
      return absl::InternalError(
          absl::StrCat("reference stream for prompt ", v, " failed: ", Describe(s)));
    }
    refs.push_back(s.text);
  }
  return refs;
}

// All the streams at once; with a `victim`, it gets SIGKILL once kill_after_streaming of them
// have a token.
absl::StatusOr<StreamRound> RunStreams(const ClusterBenchOptions& o, int port,
                                       const std::vector<std::string>& refs,
                                       cluster::DaemonProcess* victim) {
  std::atomic<int> streaming{0};
  std::vector<std::future<StreamOutcome>> futures;
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < o.streams; ++i) {
    const std::string body =
        GreedyBody(o.specialist_name, StoryPrompt(i % o.distinct_prompts, 3), o.stream_tokens);
    futures.push_back(std::async(std::launch::async, [port, body, &streaming] {
      return StreamCompletion(
          port, body, [&streaming] { ++streaming; }, 120);
    }));
  }
  StreamRound round;
  round.streams = o.streams;
  Clock::time_point from = t0;
  if (victim != nullptr) {
    absl::StatusOr<std::vector<double>> ready =
        PollUntil({[&] { return streaming.load() >= o.kill_after_streaming; }}, t0, seconds(60),
                  absl::StrCat(o.kill_after_streaming, " streams with a token"));
    victim->Signal(SIGKILL);  // also when the wait failed: the futures below must end
    from = Clock::now();
    round.streaming_at_kill = streaming.load();
    round.kill_at_s = std::chrono::duration<double>(from - t0).count();
    if (!ready.ok()) {
      for (auto& f : futures) f.wait();
      return ready.status();
    }
  }
  for (int i = 0; i < o.streams; ++i) Count(futures[i].get(), refs[i % refs.size()], round);
  round.last_outcome_s = MsSince(from) / 1e3;
  return round;
}

std::string RoundLine(const StreamRound& r) {
  return absl::StrCat(r.identical, " identical, ", r.different_text, " different text, ", r.errors,
                      " errors, ", r.lost, " lost, ", r.duplicated, " duplicated");
}

absl::StatusOr<KillSetting> RunKillSetting(const ClusterBenchOptions& o, int limit,
                                           const ClusterBenchProgressFn& progress) {
  const std::string dir = absl::StrCat(o.workdir, "/kill-migration-limit-", limit);
  std::filesystem::create_directories(dir);
  progress(absl::StrCat("[kill] migration_limit ", limit,
                        ": starting 1 prefill + 2 decode daemons (", "min_step_interval ",
                        o.kill_step_interval, "), logs in ", dir));
  EmbeddedCluster c;
  SCD_RETURN_IF_ERROR(StartEmbedded(o, limit, dir, c));
  SCD_ASSIGN_OR_RETURN(const std::vector<std::string> refs, ReferenceTexts(o, c.http_port));
  KillSetting s;
  s.migration_limit = limit;
  SCD_ASSIGN_OR_RETURN(s.undisturbed, RunStreams(o, c.http_port, refs, nullptr));
  progress(absl::StrCat("[kill] migration_limit ", limit, ": undisturbed round of ", o.streams,
                        " streams: ", RoundLine(s.undisturbed)));
  SCD_ASSIGN_OR_RETURN(s.killed, RunStreams(o, c.http_port, refs, c.daemons[1].get()));
  progress(absl::StrCat("[kill] migration_limit ", limit, ": decode-1 killed after ",
                        Fmt(s.killed.kill_at_s, 2), " s with ", s.killed.streaming_at_kill,
                        " streams streaming: ", RoundLine(s.killed), "; last outcome ",
                        Fmt(s.killed.last_outcome_s, 2), " s after the kill"));
  SCD_ASSIGN_OR_RETURN(const std::string m, FetchMetrics(c.http_port));
  const std::string series =
      absl::StrCat("scd_migrations_total{specialist=\"", o.specialist_name, "\",outcome=\"");
  s.migrations_completed = SampleValue(m, series + "completed\"}");
  s.migrations_failed = SampleValue(m, series + "failed\"}");
  s.migrations_refused = SampleValue(m, series + "refused\"}");
  s.retries_before_first_token =
      SampleValue(m, absl::StrCat("scd_decode_retries_total{model=\"", o.specialist_name, "\"}"));
  return s;
}

// ---- 2. and 3. on etcd ----

struct EtcdBench {
  std::unique_ptr<cluster::EtcdCluster> etcd;
  std::vector<std::unique_ptr<cluster::DaemonProcess>> prefills, decodes;
  std::vector<int> http_ports;
  ~EtcdBench() {
    StopAll(decodes);
    StopAll(prefills);
  }
};

nlohmann::json EtcdControlPlane(const ClusterBenchOptions& o, const std::string& endpoints) {
  return {{"registry", "etcd"},
          {"etcd_endpoints", endpoints},
          {"etcd_prefix", "/scd-cluster-bench"},
          {"cluster_token", kToken},
          {"lease", o.lease}};
}

nlohmann::json EtcdPrefillJson(const ClusterBenchOptions& o, const std::string& endpoints,
                               const std::string& instance) {
  nlohmann::json c = EmbeddedPrefillJson(o, "127.0.0.1:0", 1);
  c["instance_id"] = instance;
  c["control_plane"] = EtcdControlPlane(o, endpoints);
  c["control_plane"]["heartbeat_interval"] = "500ms";
  return c;
}

nlohmann::json EtcdDecodeJson(const ClusterBenchOptions& o, const std::string& endpoints,
                              const std::string& instance) {
  nlohmann::json c = cluster::DecodeDaemonJson(DecodeSpec(o), 0);
  c["instance_id"] = instance;
  c["control_plane"] = EtcdControlPlane(o, endpoints);
  c["control_plane"]["register_wait"] = "5s";
  return c;
}

absl::Status StartEtcdBench(const ClusterBenchOptions& o, EtcdBench& c,
                            const ClusterBenchProgressFn& progress) {
  const std::string dir = o.workdir + "/etcd";
  std::filesystem::create_directories(dir);
  progress(absl::StrCat("[etcd] starting ", o.etcd_members,
                        " etcd members, 2 prefill and 2 decode ", "daemons (registry etcd, lease ",
                        o.lease, "), logs in ", dir));
  cluster::EtcdClusterOptions eo;
  eo.members = o.etcd_members;
  eo.dir = dir;
  eo.binary = o.etcd_binary;
  SCD_ASSIGN_OR_RETURN(c.etcd, cluster::EtcdCluster::Start(eo));
  const std::string endpoints = c.etcd->endpoints();
  for (int i = 1; i <= 2; ++i) {
    const std::string name = absl::StrCat("prefill-", i);
    SCD_ASSIGN_OR_RETURN(cluster::StartedPrefill p,
                         cluster::StartPrefillDaemon(o.bin_dir, EtcdPrefillJson(o, endpoints, name),
                                                     dir, name, seconds(120)));
    c.prefills.push_back(std::move(p.process));
    c.http_ports.push_back(p.http_port);
  }
  for (int i = 1; i <= 2; ++i) {
    const std::string name = absl::StrCat("decode-", i);
    SCD_ASSIGN_OR_RETURN(auto d,
                         cluster::StartWithConfig(o.bin_dir + "/scd-decode",
                                                  EtcdDecodeJson(o, endpoints, name), dir, name));
    c.decodes.push_back(std::move(d));
  }
  for (int i = 0; i < 2; ++i) {
    SCD_RETURN_IF_ERROR(cluster::WaitForDecodeInstances(c.http_ports[i], o.specialist_name,
                                                        *c.prefills[i], c.decodes, seconds(120)));
  }
  return absl::OkStatus();
}

// Whether prefill daemon i's gauge satisfies `test` now.
std::function<bool()> GaugeIs(const ClusterBenchOptions& o, const EtcdBench& c, int i,
                              std::function<bool(int)> test) {
  const int port = c.http_ports[i];
  const std::string model = o.specialist_name;
  return [port, model, test] {
    absl::StatusOr<int> n = cluster::LiveDecodeInstances(port, model);
    return n.ok() && test(*n);
  };
}

std::function<bool()> LogHas(const cluster::DaemonProcess& p, const std::string& event,
                             const std::string& instance) {
  return [&p, event, instance] { return Logged(p, event, instance).has_value(); };
}

// The rows of MembershipRows, in order.
constexpr int kStartToStarted = 0, kStartToJoined = 1, kStartToRoutable = 2, kStartedToRoutable = 3,
              kKillToLeft = 4, kKillToGaugeDrop = 5;

std::vector<Timing> MembershipRows() {
  return {{"process start -> decode_started (its announcement is in etcd)", {}},
          {"process start -> decode_joined logged by both prefill daemons (log time stamps)", {}},
          {"process start -> routable on both (scd_decode_instances gauge, polled 10 ms)", {}},
          {"decode_started -> routable on both (gauge)", {}},
          {"kill -9 -> decode_left in both prefill logs (polled 10 ms)", {}},
          {"kill -9 -> gauge dropped on both (polled 10 ms)", {}}};
}

// One more decode daemon: timed from its fork to routable on both prefill daemons, then from
// its SIGKILL to gone from both.
absl::Status MeasureJoinAndLeave(const ClusterBenchOptions& o, EtcdBench& c, int repeat,
                                 std::vector<Timing>& rows) {
  const std::string instance = absl::StrCat("decode-join-", repeat);
  const int before = static_cast<int>(c.decodes.size());
  const nlohmann::json config = EtcdDecodeJson(o, c.etcd->endpoints(), instance);
  const absl::Time wall0 = absl::Now();
  const Clock::time_point t0 = Clock::now();
  SCD_ASSIGN_OR_RETURN(
      std::unique_ptr<cluster::DaemonProcess> d,
      cluster::StartWithConfig(o.bin_dir + "/scd-decode", config, o.workdir + "/etcd", instance));
  auto more = [before](int n) { return n > before; };
  SCD_ASSIGN_OR_RETURN(std::vector<double> routable,
                       PollUntil({GaugeIs(o, c, 0, more), GaugeIs(o, c, 1, more)}, t0, seconds(60),
                                 instance + " routable on both prefill daemons", d.get()));
  SCD_ASSIGN_OR_RETURN(const nlohmann::json started,
                       d->WaitForEvent("decode_started", seconds(10)));
  SCD_ASSIGN_OR_RETURN(const double started_ms, StampMs(started, wall0));
  double joined_ms = 0;
  for (const auto& p : c.prefills) {
    SCD_RETURN_IF_ERROR(PollUntil({LogHas(*p, "decode_joined", instance)}, Clock::now(),
                                  seconds(10), "decode_joined")
                            .status());
    SCD_ASSIGN_OR_RETURN(const double ms, StampMs(*Logged(*p, "decode_joined", instance), wall0));
    joined_ms = std::max(joined_ms, ms);
  }
  const double routable_ms = std::max(routable[0], routable[1]);
  rows[kStartToStarted].samples_ms.push_back(started_ms);
  rows[kStartToJoined].samples_ms.push_back(joined_ms);
  rows[kStartToRoutable].samples_ms.push_back(routable_ms);
  rows[kStartedToRoutable].samples_ms.push_back(routable_ms - started_ms);

  d->Signal(SIGKILL);
  const Clock::time_point t1 = Clock::now();
  auto back = [before](int n) { return n <= before; };
  SCD_ASSIGN_OR_RETURN(std::vector<double> gone,
                       PollUntil({LogHas(*c.prefills[0], "decode_left", instance),
                                  LogHas(*c.prefills[1], "decode_left", instance),
                                  GaugeIs(o, c, 0, back), GaugeIs(o, c, 1, back)},
                                 t1, seconds(60), instance + " gone from both prefill daemons"));
  d->Wait(seconds(5));
  rows[kKillToLeft].samples_ms.push_back(std::max(gone[0], gone[1]));
  rows[kKillToGaugeDrop].samples_ms.push_back(std::max(gone[2], gone[3]));
  return absl::OkStatus();
}

absl::StatusOr<ThroughputRun> MeasureThroughput(const ClusterBenchOptions& o, const EtcdBench& c,
                                                int prefill_daemons, uint64_t seed,
                                                const ClusterBenchProgressFn& progress) {
  ThroughputRun run;
  run.prefill_daemons = prefill_daemons;
  run.label = prefill_daemons == 1 ? "prefill-1 alone" : "prefill-1 + prefill-2";
  loadgen::LoadOptions load;
  load.client.target.base = absl::StrCat("http://127.0.0.1:", c.http_ports[0]);
  load.client.timeout_s = 120;
  for (int i = 1; i < prefill_daemons; ++i) {
    load.more_targets.push_back({absl::StrCat("http://127.0.0.1:", c.http_ports[i]), ""});
  }
  load.body.api = loadgen::Api::kCompletions;
  load.body.model = o.specialist_name;
  load.body.max_tokens = o.max_tokens;
  load.body.extra_body = {{"temperature", 0}};
  load.concurrency = o.concurrency;
  load.requests = o.requests;
  load.warmup = o.warmup;
  load.seed = seed;
  load.progress_period_s = 5;
  // Prompts of their own per run, each used once: no run finds another's prefixes cached.
  SCD_ASSIGN_OR_RETURN(const std::vector<loadgen::Prompt> prompts,
                       loadgen::SyntheticPrompts(o.requests + o.warmup, o.prompt_words, seed));
  SCD_ASSIGN_OR_RETURN(
      const loadgen::RunResult result,
      loadgen::RunLoad(load, prompts, [&](const loadgen::Progress& p) {
        progress(absl::StrCat("[throughput] ", run.label, " ", loadgen::FormatProgress(p)));
      }));
  const loadgen::RunStats s = loadgen::ComputeStats(result.records, loadgen::Slo());
  run.issued = s.issued;
  run.ok = s.ok();
  run.duration_s = s.duration_s;
  run.requests_per_s = s.request_rps;
  run.output_tokens_per_s = s.output_tokens_per_s;
  run.ttft_p50_ms = s.ttft_s.p50 * 1e3;
  run.ttft_p99_ms = s.ttft_s.p99 * 1e3;
  progress(absl::StrCat("[throughput] ", run.label, ": ", run.ok, "/", run.issued, " ok, ",
                        Fmt(run.requests_per_s), " req/s, ", Fmt(run.output_tokens_per_s),
                        " output tok/s, TTFT p50 ", Fmt(run.ttft_p50_ms), " ms p99 ",
                        Fmt(run.ttft_p99_ms), " ms"));
  return run;
}

absl::Status RunOnEtcd(const ClusterBenchOptions& o, ClusterBenchResult& r,
                       const ClusterBenchProgressFn& progress) {
  EtcdBench c;
  SCD_RETURN_IF_ERROR(StartEtcdBench(o, c, progress));
  if (o.membership) {
    r.membership = MembershipRows();
    for (int i = 0; i < o.repeats; ++i) {
      SCD_RETURN_IF_ERROR(MeasureJoinAndLeave(o, c, i + 1, r.membership));
      const std::vector<Timing>& m = r.membership;
      progress(absl::StrCat("[membership] ", i + 1, "/", o.repeats, ": routable on both after ",
                            Fmt(m[kStartToRoutable].samples_ms.back(), 0), " ms (decode_joined ",
                            Fmt(m[kStartToJoined].samples_ms.back(), 0), " ms); decode_left ",
                            Fmt(m[kKillToLeft].samples_ms.back(), 0), " ms after the kill"));
    }
  }
  if (o.throughput) {
    for (int daemons : {1, 2}) {
      SCD_ASSIGN_OR_RETURN(ThroughputRun run,
                           MeasureThroughput(o, c, daemons, 100 + daemons, progress));
      r.throughput.push_back(std::move(run));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterBenchResult> RunClusterBench(const ClusterBenchOptions& o,
                                                   const ClusterBenchProgressFn& progress) {
  const Clock::time_point t0 = Clock::now();
  ClusterBenchResult r;
  r.date = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  r.nproc = Nproc();
  r.cpu_model = CpuModel();
  const char* blas = std::getenv("OPENBLAS_NUM_THREADS");
  r.openblas_threads = blas == nullptr ? "" : blas;
  r.loadavg_start = LoadAverage();
  if (o.kill) {
    for (int limit : o.migration_limits) {
      SCD_ASSIGN_OR_RETURN(KillSetting s, RunKillSetting(o, limit, progress));
      r.kill.push_back(std::move(s));
    }
  }
  if (o.membership || o.throughput) SCD_RETURN_IF_ERROR(RunOnEtcd(o, r, progress));
  r.wall_s = MsSince(t0) / 1e3;
  r.loadavg_end = LoadAverage();
  return r;
}

}  // namespace scd::e2e
