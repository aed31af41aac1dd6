// SEKV in the decode daemon: a scd-decode with `sekv.enabled` serves requests that
// arrive through the real prefill daemon and SCD payloads, decodes them through a SEKV cache
// at the configured budget, and reports the cache's GPU-tier bytes in /metrics. A bad sekv
// key is refused at start-up with the key's name; SEKV without a calibrated router is logged
// as running below its measured quality.
#include <catch2/catch.hpp>
#include <chrono>
#include <sstream>
#include <string>
#include <thread>

#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;

std::string SekvRouterPath() {
  return std::string(SCD_SOURCE_DIR) + "/configs/calibration/stories260K-babi-qa.sekv.safetensors";
}

const char kStory[] =
    "Mary moved to the bathroom. John went to the hallway. Daniel went back to the hallway. "
    "Sandra moved to the garden. John moved to the office. Sandra journeyed to the bathroom. "
    "Mary moved to the hallway. Daniel travelled to the office. ";

// Three questions about the story through the prefill daemon, the last one streamed.
void ServeStories(int http_port) {
  for (const char* who : {"Mary", "Sandra"}) {
    json body = {{"model", "stories260K-babi-qa"},
                 {"prompt", std::string(kStory) + "Where is " + who + "?"},
                 {"max_tokens", 6},
                 {"temperature", 0}};
    HttpResult r = HttpPost(http_port, "/v1/completions", body.dump());
    INFO(r.body);
    REQUIRE(r.status == 200);
    json j = json::parse(r.body);
    CHECK(j["usage"]["completion_tokens"].get<int>() >= 1);
  }
  SseResult s = HttpStream(http_port, "/v1/completions",
                           json({{"model", "stories260K-babi-qa"},
                                 {"prompt", std::string(kStory) + "Where is John?"},
                                 {"max_tokens", 6},
                                 {"temperature", 0},
                                 {"stream", true}})
                               .dump());
  REQUIRE(s.status == 200);
  CHECK(s.done());
}

// gRPC Generate: the Done event's timings carry the SEKV build stage.
void CheckSekvBuildTimings(const std::string& grpc_address) {
  scd::v1::GenerateRequest req;
  req.set_model("stories260K-babi-qa");
  req.set_prompt(std::string(kStory) + "Where is Mary?");
  req.set_max_tokens(4);
  req.mutable_sampling()->set_temperature(0);
  GrpcOutcome g = GrpcGenerate(grpc_address, req);
  REQUIRE(g.status.ok());
  REQUIRE(g.events.back().has_done());
  const auto& t = g.events.back().done().timings();
  CHECK(t.sekv_build_ms() > 0);
  CHECK(t.rebuild_ms() > 0);
  CHECK(t.rebuild_ms() + t.sekv_build_ms() < t.ttft_ms());
}

// After the four requests, /metrics (`body`) counts them, holds the GPU tier within the
// budget and the CPU tier in host memory, and its live gauges are back to zero.
void CheckSekvTierMetrics(const std::string& body) {
  CHECK(MetricValue(body, "scd_decode_sekv_requests_total") == std::optional<double>(4));
  // Each SEKV request's hierarchy build is timed once.
  CHECK(MetricValue(body, "scd_decode_sekv_build_seconds_count") == std::optional<double>(4));
  const auto gpu = MetricValue(body, "scd_decode_sekv_gpu_bytes_total");
  const auto full = MetricValue(body, "scd_decode_sekv_full_kv_bytes_total");
  REQUIRE(gpu.has_value());
  REQUIRE(full.has_value());
  CHECK(*gpu > 0);
  CHECK(*gpu / *full <= 0.40);
  CHECK(*gpu / *full >= 0.25);
  // The CPU tiers' bases stay in host memory.
  const auto cpu = MetricValue(body, "scd_decode_sekv_cpu_bytes_total");
  REQUIRE(cpu.has_value());
  CHECK(*cpu > 0);
  // Nothing runs any more: the live gauges are back to zero.
  CHECK(MetricValue(body, "scd_decode_sekv_gpu_bytes") == std::optional<double>(0));
  CHECK(MetricValue(body, "scd_decode_sekv_cpu_bytes") == std::optional<double>(0));
  CHECK(MetricValue(body, "scd_decode_sekv_host_budget_bytes") == std::optional<double>(64 << 20));
  CHECK(MetricValue(body, "scd_decode_admitted_past_host_wait_total") == std::optional<double>(0));
}

// The gauges and counters sampled every 100 ms, read again from `decode_port` after the
// `first` sample until they settle at what the requests leave.
void CheckSekvCountersSettle(int decode_port, const std::string& first) {
  // The host-memory reservations (sekv.max_host_bytes) are given back, within the gauge's
  // 100 ms sampling.
  std::string body = first;
  for (int i = 0; i < 50; ++i) {
    if (MetricValue(body, "scd_decode_sekv_host_reserved_bytes") == std::optional<double>(0)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    body = HttpGet(decode_port, "/metrics").body;
  }
  CHECK(MetricValue(body, "scd_decode_sekv_host_reserved_bytes") == std::optional<double>(0));
  // The requests came one after another, so each SEKV decode step held one of them (both
  // counters come from one sample of the engine's statistics).
  for (int i = 0; i < 50 && !(MetricValue(body, "scd_decode_sekv_steps_total") > 0.0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    body = HttpGet(decode_port, "/metrics").body;
  }
  const auto steps = MetricValue(body, "scd_decode_sekv_steps_total");
  REQUIRE(steps.has_value());
  CHECK(*steps > 0);
  CHECK(MetricValue(body, "scd_decode_sekv_step_rows_total") == steps);
  // Every prompt took the SEKV path (sekv.min_prompt_tokens 0): no step mixed the two kinds.
  CHECK(MetricValue(body, "scd_decode_mixed_steps_total") == std::optional<double>(0));
}

}  // namespace

TEST_CASE("A decode daemon with SEKV serves requests and reports its GPU tier", "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  json dc = DecodeConfig(prefill.grpc_address);
  dc["sekv"] = {{"enabled", true},
                {"budget", 0.4},
                {"router", SekvRouterPath()},
                {"max_host_bytes", 64 << 20}};
  DecodeHandle decode = StartDecode(dir, dc);
  REQUIRE(WaitForReady(prefill.http_port, 200, std::chrono::seconds(10)));
  REQUIRE(decode.http_port > 0);

  ServeStories(prefill.http_port);
  CheckSekvBuildTimings(prefill.grpc_address);

  HttpResult m = HttpGet(decode.http_port, "/metrics");
  REQUIRE(m.status == 200);
  INFO(m.body);
  CheckSekvTierMetrics(m.body);
  CheckSekvCountersSettle(decode.http_port, m.body);
}

TEST_CASE("A bad sekv key stops the decode daemon with the key's name", "[daemons]") {
  const std::string dir = TempDir();
  json dc = DecodeConfig("127.0.0.1:1");
  dc["sekv"] = {{"enabled", true}, {"budget", 1.5}};
  std::string log;
  CHECK(RunToExit("scd-decode", dir, dc, "sekv-bad", &log) == std::optional<int>(2));
  CHECK(log.find("sekv.budget") != std::string::npos);
}

// The start-up log's config_below_measured_quality lines ("" when there is none).
std::string QualityWarning(const std::string& log) {
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("config_below_measured_quality") != std::string::npos) return line;
  }
  return "";
}

TEST_CASE("SEKV without a calibrated router says so at start-up", "[daemons]") {
  const std::string dir = TempDir();
  json dc = DecodeConfig("127.0.0.1:1");
  // A missing artifact stops start-up once the config's checks have run.
  dc["model"]["artifact"] = dir + "/missing.scd.safetensors";
  dc["sekv"] = {{"enabled", true}};
  std::string log;
  CHECK(RunToExit("scd-decode", dir, dc, "sekv-no-router", &log) == std::optional<int>(1));
  const std::string line = QualityWarning(log);
  INFO(log);
  REQUIRE(!line.empty());
  const json warning = json::parse(line);
  CHECK(warning["level"] == "warning");
  CHECK(warning["key"] == "sekv.router");
  CHECK(warning["consequence"].get<std::string>().find("times the calibrated router") !=
        std::string::npos);

  dc["sekv"]["router"] = SekvRouterPath();
  CHECK(RunToExit("scd-decode", dir, dc, "sekv-router", &log) == std::optional<int>(1));
  CHECK(QualityWarning(log).empty());
}

}  // namespace scd::testing
