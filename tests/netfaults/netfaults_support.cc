// See netfaults_support.h.
#include "tests/netfaults/netfaults_support.h"

#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <thread>

namespace scd::testing {

using nlohmann::json;

json LabPrefillConfig() {
  json c = PrefillConfig("scd");
  c["http"] = {{"host", "127.0.0.1"}, {"port", kPrefillHttpPort}, {"threads", 48}};
  c["grpc"] = {{"listen", "0.0.0.0:" + std::to_string(kPrefillGrpcPort)},
               {"keepalive_time", "1s"},
               {"keepalive_timeout", "2s"}};
  c["data_plane"] = {{"transport", "tcp"}, {"peer_timeout", "3s"}};
  c["limits"]["request_timeout"] = std::to_string(static_cast<int>(kRequestTimeoutS)) + "s";
  c["drain_timeout"] = "5s";
  return c;
}

json LabDecodeConfig(int i) {
  json c = DecodeConfig(NetnsLab::PrefillSide(i) + ":" + std::to_string(kPrefillGrpcPort));
  const std::string self = NetnsLab::DecodeSide(i);
  c["instance_id"] = "decode-" + std::to_string(i);
  c["grpc"] = {{"listen", self + ":" + std::to_string(kDecodeRpcPort)},
               {"keepalive_time", "1s"},
               {"keepalive_timeout", "2s"}};
  c["data_plane"] = {{"transport", "tcp"},
                     {"listen", self + ":" + std::to_string(kDecodeDataPort)},
                     {"peer_timeout", "3s"},
                     {"payload_wait", "2s"}};
  c["http"] = {{"host", "127.0.0.1"}, {"port", kDecodeHttpPort}};
  c["drain_timeout"] = "5s";
  return c;
}

std::string CompletionBody(const std::string& prompt, int max_tokens, bool stream) {
  return json({{"model", "stories260K-babi-qa"},
               {"prompt", prompt},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"stream", stream}})
      .dump();
}

std::string LongPrompt(int tokens, int variant) {
  static const char* kNames[] = {"Mary", "John", "Sandra", "Daniel"};
  static const char* kPlaces[] = {"garden", "office", "kitchen", "hallway", "bedroom", "bathroom"};
  std::string text;
  // About 14 tokens per line with the bundled models' small vocabulary.
  for (int line = 0; line * 14 + 8 < tokens; ++line) {
    text += std::string(kNames[(line + variant) % 4]) + " went to the " +
            kPlaces[(line * 5 + variant * 3) % 6] + ". ";
  }
  return text + "Where is " + kNames[variant % 4] + "?";
}

namespace {

void Absorb(const json& j, Outcome* out) {
  if (j.contains("error")) {
    ++out->errors;
    if (out->error.empty()) out->error = j["error"].value("message", "?");
    return;
  }
  if (!j.contains("choices")) return;
  for (const auto& c : j["choices"]) {
    if (c.contains("text") && c["text"].is_string()) out->text += c["text"].get<std::string>();
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) ++out->finishes;
  }
}

}  // namespace

Outcome Classify(const SseResult& stream) {
  Outcome out;
  out.status = stream.status;
  out.done = stream.done();
  if (stream.status != 200) {
    json j = json::parse(stream.body, nullptr, false);
    if (!j.is_discarded()) Absorb(j, &out);
    return out;
  }
  for (const std::string& e : stream.events) {
    if (e == "[DONE]") continue;
    json j = json::parse(e, nullptr, false);
    if (!j.is_discarded()) Absorb(j, &out);
  }
  return out;
}

Outcome Classify(const HttpResult& response) {
  Outcome out;
  out.status = response.status;
  json j = json::parse(response.body, nullptr, false);
  if (!j.is_discarded()) Absorb(j, &out);
  return out;
}

std::optional<double> WaitFor(const std::function<bool()>& condition,
                              std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (condition()) return SecondsSince(start);
    if (std::chrono::steady_clock::now() - start > timeout) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int DecodeReadyStatus(const NetnsLab& lab, int i) {
  return RunInNetns(lab.decode_ns(i), [] {
    return HttpGet(kDecodeHttpPort, "/ready", std::chrono::seconds(2)).status;
  });
}

bool AllDecodeReady(const NetnsLab& lab, int n, int status) {
  for (int i = 1; i <= n; ++i) {
    if (DecodeReadyStatus(lab, i) != status) return false;
  }
  return true;
}

std::optional<double> DecodeMetric(const NetnsLab& lab, int i, const std::string& series) {
  const std::string text = RunInNetns(lab.decode_ns(i), [] {
    return HttpGet(kDecodeHttpPort, "/metrics", std::chrono::seconds(2)).body;
  });
  return MetricValue(text, series);
}

std::optional<double> PrefillMetric(const std::string& series) {
  return MetricValue(HttpGet(kPrefillHttpPort, "/metrics", std::chrono::seconds(2)).body, series);
}

int CountEvents(DaemonProcess& process, const std::string& event) {
  int n = 0;
  for (const json& j : process.LogLines()) n += j.value("event", "") == event ? 1 : 0;
  return n;
}

double StopAllAndCheck(const std::vector<DaemonProcess*>& processes) {
  const auto start = std::chrono::steady_clock::now();
  for (DaemonProcess* p : processes) p->Signal(SIGTERM);
  double slowest = 0;
  for (DaemonProcess* p : processes) {
    const std::optional<int> rc = p->Wait(std::chrono::seconds(20));
    INFO("daemon log:\n" << p->LogText());
    CHECK(rc == std::optional<int>(0));
    slowest = std::max(slowest, SecondsSince(start));
  }
  return slowest;
}

void Report(const std::string& name, double value, const std::string& unit) {
  std::printf("[netfaults] %s = %.3f %s\n", name.c_str(), value, unit.c_str());
  std::fflush(stdout);
}

void ReportText(const std::string& name, const std::string& text) {
  std::printf("[netfaults] %s: %s\n", name.c_str(), text.c_str());
  std::fflush(stdout);
}

}  // namespace scd::testing
