// Process faults around daemons in their own network namespaces (netns_lab.h):
//   * kill -9 of the prefill daemon: the decode daemons notice, drop the dead peer's state
//     (a stream it was reading, a payload whose RPC will never come), and register with the
//     restarted prefill daemon by themselves;
//   * kill -9 of a decode daemon under load: counted on the client side, every request has
//     exactly one outcome, a completion with the undisturbed text (streams cut mid-way migrate
//     to the other replica): none lost, none duplicated, no error;
//   * a decode daemon restarted with the wrong specialist or artifact: registration refused
//     with the reason, and nothing routed to it.
// (tests/daemons/faults_test.cc already covers SIGKILL of a decode daemon with two streams on
// loopback, wrong token, and wrong pair at first start; these cases do not repeat them.)
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "tests/netfaults/netfaults_support.h"
#include "tests/netfaults/tcp_relay.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// The log line that gives the refusal.
std::string RefusalLine(const std::string& log) {
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("registration refused") != std::string::npos) return line;
  }
  return "(none)";
}

// After the prefill daemon's kill -9 at `killed`: both decode daemons notice, decode-1 frees
// the call it was streaming, decode-2 drops the payload whose RPC will never come. Each figure
// is the time from the kill until the check first saw it (checked in turn).
void CheckPeerStateDropped(const NetnsLab& lab, Clock::time_point killed) {
  // Both decode daemons notice the control plane is gone.
  const bool noticed =
      WaitFor([&] { return AllDecodeReady(lab, 2, 503); }, seconds(10)).has_value();
  const double noticed_s = SecondsSince(killed);
  CHECK(noticed);
  CHECK(WaitFor([&] { return DecodeMetric(lab, 1, "scd_decode_registered").value_or(1) == 0; },
                seconds(2))
            .has_value());  // the gauge follows within its 100 ms sampling
  // decode-1: the call it was streaming is cancelled and its slot freed.
  const bool stream_freed =
      WaitFor(
          [&] {
            return DecodeMetric(lab, 1, "scd_decode_active_requests").value_or(1) == 0 &&
                   DecodeMetric(lab, 1, "scd_decode_requests_total{outcome=\"cancelled\"}")
                           .value_or(0) == 1;
          },
          seconds(10))
          .has_value();
  const double stream_freed_s = SecondsSince(killed);
  CHECK(stream_freed);
  // decode-2: the payload whose RPC will never come is dropped once its sender hung up
  // (payload_wait, 2 s here), not after the 60 s mailbox TTL.
  const bool payload_dropped =
      WaitFor(
          [&] {
            return DecodeMetric(lab, 2, "scd_decode_pending_payloads").value_or(1) == 0 &&
                   DecodeMetric(lab, 2, "scd_decode_payloads_total{outcome=\"orphaned\"}")
                           .value_or(0) == 1;
          },
          seconds(10))
          .has_value();
  const double payload_dropped_s = SecondsSince(killed);
  CHECK(payload_dropped);
  CHECK(payload_dropped_s < 8);
  Report("prefill kill -9: both decode daemons unregistered (/ready 503) by", noticed_s, "s");
  Report("prefill kill -9: decode-1 stream cancelled, slot freed by", stream_freed_s, "s");
  Report("prefill kill -9: decode-2 dropped the orphaned payload by", payload_dropped_s, "s");
}

// The prefill daemon restarted on the same addresses (`pc`): both decode daemons register
// with it by themselves.
PrefillHandle RestartAndRejoin(const NetnsLab& lab, const std::string& dir, const json& pc,
                               DaemonProcess& d1, DaemonProcess& d2) {
  const auto restart = Clock::now();
  PrefillHandle again = StartPrefill(dir, pc, "prefill-2");
  const double started_s = SecondsSince(restart);
  const std::optional<double> rejoined =
      WaitFor([&] { return AllDecodeReady(lab, 2); }, seconds(20));
  REQUIRE(rejoined.has_value());
  CHECK(*rejoined < 15);
  CHECK(WaitForReady(kPrefillHttpPort, 200, seconds(5)));
  Report("prefill kill -9: restarted prefill daemon up after", started_s, "s");
  Report("prefill kill -9: both decode daemons re-registered after that", *rejoined, "s");
  CHECK(
      WaitFor(
          [&] { return CountEvents(d1, "registered") >= 1 && CountEvents(d2, "registered") >= 1; },
          seconds(2))
          .has_value());
  return again;
}

// Both decode daemons serve the new prefill daemon.
void CheckBothDecodeServe(const NetnsLab& lab) {
  const std::string ok = "scd_decode_requests_total{outcome=\"ok\"}";
  for (int i = 0; i < 8 && (DecodeMetric(lab, 1, ok).value_or(0) == 0 ||
                            DecodeMetric(lab, 2, ok).value_or(0) == 0);
       ++i) {
    const Outcome o = Classify(
        HttpPost(kPrefillHttpPort, "/v1/completions", CompletionBody(LongPrompt(60, i), 4, false)));
    INFO("request " << i << ": " << o.status << " " << o.error);
    CHECK(o.completed());
  }
  CHECK(DecodeMetric(lab, 1, ok).value_or(0) >= 1);
  CHECK(DecodeMetric(lab, 2, ok).value_or(0) >= 1);
}

}  // namespace

TEST_CASE(
    "kill -9 of the prefill daemon: decode daemons drop its state and re-register when it "
    "returns",
    "[netfaults]") {
  NETFAULTS_LAB(lab, 2);
  const std::string dir = TempDir();
  const json pc = LabPrefillConfig();
  PrefillHandle prefill = StartPrefill(dir, pc, "prefill-1");
  // decode-1 streams slowly; decode-2's Decode RPCs pass a relay that can hold them, so a
  // payload can sit in its mailbox when the prefill daemon dies (sent, its RPC not arrived).
  json d1c = LabDecodeConfig(1);
  d1c["engine"]["min_step_interval"] = "40ms";
  std::string why;
  auto hold = TcpRelay::Start("", NetnsLab::PrefillSide(2), 7120, NetnsLab::DecodeSide(2),
                              kDecodeRpcPort, &why);
  REQUIRE(hold != nullptr);
  json d2c = LabDecodeConfig(2);
  d2c["grpc"]["advertise"] = hold->address();
  DecodeHandle d1 = StartDecode(dir, d1c, "decode-1", lab->decode_ns(1));
  DecodeHandle d2 = StartDecode(dir, d2c, "decode-2", lab->decode_ns(2));
  REQUIRE(WaitFor([&] { return AllDecodeReady(*lab, 2); }, seconds(15)).has_value());

  // Two requests at once: least-loaded routing sends one to each daemon.
  hold->SetPaused(true);
  const std::string body = json({{"model", "stories260K-babi-qa"},
                                 {"prompt", LongPrompt(100)},
                                 {"max_tokens", 200},
                                 {"temperature", 0.8},
                                 {"seed", 5},
                                 {"stream", true}})
                               .dump();
  auto s1 = std::async(std::launch::async,
                       [&] { return HttpStream(kPrefillHttpPort, "/v1/completions", body); });
  auto s2 = std::async(std::launch::async,
                       [&] { return HttpStream(kPrefillHttpPort, "/v1/completions", body); });
  const std::optional<double> staged = WaitFor(
      [&] {
        return DecodeMetric(*lab, 1, "scd_decode_active_requests").value_or(0) == 1 &&
               DecodeMetric(*lab, 2, "scd_decode_pending_payloads").value_or(0) == 1;
      },
      seconds(15));
  REQUIRE(staged.has_value());

  prefill.process->Signal(SIGKILL);
  REQUIRE(prefill.process->Wait(seconds(5)).has_value());
  const auto killed = Clock::now();
  // The front door is gone, so its clients see the connection drop; they must not hang.
  CHECK(s1.wait_for(seconds(10)) == std::future_status::ready);
  CHECK(s2.wait_for(seconds(10)) == std::future_status::ready);

  CheckPeerStateDropped(*lab, killed);
  // The prefill daemon comes back on the same addresses; nobody restarts the decode daemons.
  hold->SetPaused(false);
  PrefillHandle again = RestartAndRejoin(*lab, dir, pc, *d1.process, *d2.process);
  CheckBothDecodeServe(*lab);
  StopAllAndCheck({d1.process.get(), d2.process.get(), again.process.get()});
}

namespace {

// The load of the decode kill: kLoadRequests streams of kLoadTokens tokens at once over
// kLoadPrompts prompts.
constexpr int kLoadPrompts = 4, kLoadRequests = 32, kLoadTokens = 24;
using LoadResult = std::future<std::pair<Outcome, double>>;

// Undisturbed answers (greedy): a completion under load must match them exactly, so a
// retried request that repeated or skipped tokens would show.
std::vector<std::string> UndisturbedAnswers() {
  std::vector<std::string> reference;
  for (int v = 0; v < kLoadPrompts; ++v) {
    const Outcome o = Classify(HttpStream(kPrefillHttpPort, "/v1/completions",
                                          CompletionBody(LongPrompt(48, v), kLoadTokens, true)));
    REQUIRE(o.completed());
    reference.push_back(o.text);
  }
  return reference;
}

// Starts the load: each request's outcome and seconds; `streaming` counts the requests that
// have had their first chunk.
std::vector<LoadResult> StartLoad(std::atomic<int>& streaming) {
  std::vector<LoadResult> load;
  for (int r = 0; r < kLoadRequests; ++r) {
    load.push_back(std::async(std::launch::async, [&streaming, r] {
      bool counted = false;
      const auto sent = Clock::now();
      const SseResult s = HttpStream(
          kPrefillHttpPort, "/v1/completions",
          CompletionBody(LongPrompt(48, r % kLoadPrompts), kLoadTokens, true),
          [&](const std::string&) {
            if (!counted) ++streaming;
            counted = true;
            return true;
          },
          seconds(60));
      return std::make_pair(Classify(s), SecondsSince(sent));
    }));
  }
  return load;
}

// What the clients saw: each request's one outcome, and the slowest request's seconds.
struct LoadTally {
  int completed = 0, errored = 0, lost = 0, duplicated = 0, wrong_text = 0;
  double slowest = 0;
};

LoadTally TallyLoad(std::vector<LoadResult>& load, const std::vector<std::string>& reference) {
  LoadTally t;
  for (int r = 0; r < kLoadRequests; ++r) {
    const auto [o, took] = load[r].get();
    t.slowest = std::max(t.slowest, took);
    INFO("request " << r << ": status " << o.status << ", finishes " << o.finishes << ", errors "
                    << o.errors << ", error '" << o.error << "'");
    if (o.finishes + o.errors > 1) {
      ++t.duplicated;  // two terminal events for one request
    } else if (o.completed()) {
      ++t.completed;
      if (o.text != reference[r % kLoadPrompts]) ++t.wrong_text;
    } else if (o.failed_clearly()) {
      ++t.errored;
      CHECK(o.error.find("decode daemon") != std::string::npos);
    } else {
      ++t.lost;  // no response, or a stream that ended without a terminal event
    }
  }
  return t;
}

// The server counted the same as the clients: every request once (`requests_series` had
// `requests_before` before the load), and as many errors as clients saw.
void CheckServerCounts(const std::string& requests_series, double requests_before,
                       const LoadTally& t) {
  CHECK(PrefillMetric(requests_series).value_or(0) - requests_before == kLoadRequests);
  double server_errors = 0;
  for (const char* code : {"UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "UNKNOWN", "DATA_LOSS",
                           "NOT_FOUND", "ABORTED", "RESOURCE_EXHAUSTED", "CANCELLED"}) {
    server_errors +=
        PrefillMetric("scd_request_errors_total{model=\"stories260K-babi-qa\",code=\"" +
                      std::string(code) + "\"}")
            .value_or(0);
  }
  CHECK(server_errors == t.errored);
}

void ReportLoadRun(const LoadTally& t, double migrated, double drained_s, double whole_s) {
  const double retries =
      PrefillMetric("scd_decode_retries_total{model=\"stories260K-babi-qa\"}").value_or(0);
  Report("decode kill -9 under load: requests", kLoadRequests, "");
  Report("decode kill -9 under load: completed (text identical to the undisturbed run)",
         t.completed, "");
  Report("decode kill -9 under load: explicit errors", t.errored, "");
  Report("decode kill -9 under load: lost", t.lost, "");
  Report("decode kill -9 under load: duplicated", t.duplicated, "");
  Report("decode kill -9 under load: retried on the other replica before the first token", retries,
         "");
  Report("decode kill -9 under load: migrated mid-stream to the other replica", migrated, "");
  Report("decode kill -9 under load: last outcome after the kill", drained_s, "s");
  Report("decode kill -9 under load: whole load run", whole_s, "s");
}

}  // namespace

TEST_CASE("kill -9 of a decode daemon under load: every request has exactly one outcome",
          "[netfaults]") {
  NETFAULTS_LAB(lab, 2);
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, LabPrefillConfig());
  json dc1 = LabDecodeConfig(1), dc2 = LabDecodeConfig(2);
  for (json* c : {&dc1, &dc2}) {
    (*c)["engine"]["min_step_interval"] = "20ms";  // keeps requests in flight at the kill
    (*c)["engine"]["max_batch"] = 8;
  }
  // decode-1's streams last over a second each (24 steps of at least 50 ms), so the kill lands
  // while some are mid-generation even on a loaded machine.
  dc1["engine"]["min_step_interval"] = "50ms";
  DecodeHandle d1 = StartDecode(dir, dc1, "decode-1", lab->decode_ns(1));
  DecodeHandle d2 = StartDecode(dir, dc2, "decode-2", lab->decode_ns(2));
  REQUIRE(WaitFor([&] { return AllDecodeReady(*lab, 2); }, seconds(15)).has_value());

  const std::vector<std::string> reference = UndisturbedAnswers();
  const std::string requests_series =
      "scd_requests_total{model=\"stories260K-babi-qa\",mode=\"scd\"}";
  const double requests_before = PrefillMetric(requests_series).value_or(0);

  // decode-1 already streamed the reference answers: count its inter-token gaps from here.
  const std::string d1_gaps = "scd_decode_inter_token_seconds_count";
  const double d1_gaps_before = DecodeMetric(*lab, 1, d1_gaps).value_or(0);
  std::atomic<int> streaming{0};
  const auto start = Clock::now();
  std::vector<LoadResult> load = StartLoad(streaming);
  // Kill decode-1 while it is mid-generation on several streams (its inter-token histogram
  // counts tokens after each stream's first; the active gauge, sampled every 100 ms, says some
  // are still running) and others still wait for their first token.
  REQUIRE(WaitFor(
              [&] {
                return streaming.load() >= 8 &&
                       DecodeMetric(*lab, 1, d1_gaps).value_or(0) - d1_gaps_before >= 16 &&
                       DecodeMetric(*lab, 1, "scd_decode_active_requests").value_or(0) >= 3;
              },
              seconds(30))
              .has_value());
  d1.process->Signal(SIGKILL);
  const auto killed = Clock::now();

  const LoadTally t = TallyLoad(load, reference);
  const double drained_s = SecondsSince(killed);
  CHECK(t.lost == 0);
  CHECK(t.duplicated == 0);
  CHECK(t.wrong_text == 0);
  CHECK(t.completed + t.errored == kLoadRequests);
  // Streams that had tokens from decode-1 migrate to decode-2 with what they streamed
  // (limits.migration_limit 1), and those without a token yet are retried: all complete.
  CHECK(t.errored == 0);
  const double migrated =
      PrefillMetric(
          "scd_migrations_total{specialist=\"stories260K-babi-qa\",outcome=\"completed\"}")
          .value_or(0);
  CHECK(migrated > 0);
  CHECK(t.slowest < kRequestTimeoutS);
  CheckServerCounts(requests_series, requests_before, t);
  ReportLoadRun(t, migrated, drained_s, SecondsSince(start));
  StopAllAndCheck({d2.process.get(), prefill.process.get()});
}

TEST_CASE(
    "A decode daemon restarted with the wrong specialist or artifact is refused with the "
    "reason",
    "[netfaults]") {
  NETFAULTS_LAB(lab, 1);
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, LabPrefillConfig());
  DecodeHandle d1 = StartDecode(dir, LabDecodeConfig(1), "decode-1", lab->decode_ns(1));
  REQUIRE(WaitForReady(kPrefillHttpPort, 200, seconds(15)));
  d1.process->Signal(SIGTERM);
  REQUIRE(d1.process->Wait(seconds(20)) == std::optional<int>(0));
  CHECK(WaitForReady(kPrefillHttpPort, 503, seconds(5)));  // it deregistered on the way out

  std::string log;
  double took = 0;
  {  // Another specialist: a model this prefill daemon does not serve.
    json c = LabDecodeConfig(1);
    c["model"] = {{"name", "stories260K-wiki"},
                  {"path", ModelDir("stories260K-wiki")},
                  {"producer_path", ModelDir("stories260K")}};
    const auto start = Clock::now();
    CHECK(RunToExit("scd-decode", dir, c, "wrong-specialist", &log, lab->decode_ns(1)) ==
          std::optional<int>(1));
    took = SecondsSince(start);
    INFO(log);
    CHECK(log.find("registration refused") != std::string::npos);
    CHECK(log.find("'stories260K-wiki' is not served by this prefill daemon") != std::string::npos);
    Report("wrong specialist: refused, daemon exited 1 after", took, "s");
    ReportText("wrong specialist: log", RefusalLine(log));
  }
  {  // The right specialist with another artifact (fits the model, different calibration).
    const std::string other = dir + "/recalibrated.scd.safetensors";
    {
      std::ifstream in(ArtifactPath(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      REQUIRE(bytes.size() > 1024);
      bytes[bytes.size() - 1] ^= 0x01;  // the last tensor byte: a different artifact id
      std::ofstream(other, std::ios::binary) << bytes;
    }
    json c = LabDecodeConfig(1);
    c["model"]["artifact"] = other;
    const auto start = Clock::now();
    CHECK(RunToExit("scd-decode", dir, c, "wrong-artifact", &log, lab->decode_ns(1)) ==
          std::optional<int>(1));
    took = SecondsSince(start);
    INFO(log);
    CHECK(log.find("registration refused") != std::string::npos);
    CHECK(log.find("pair digest mismatch") != std::string::npos);
    CHECK(log.find("calibration artifact") != std::string::npos);
    Report("wrong artifact: refused, daemon exited 1 after", took, "s");
    ReportText("wrong artifact: log", RefusalLine(log));
  }
  // Neither got in; the right one does, and serves.
  CHECK(HttpGet(kPrefillHttpPort, "/ready").status == 503);
  DecodeHandle fixed = StartDecode(dir, LabDecodeConfig(1), "decode-fixed", lab->decode_ns(1));
  CHECK(WaitForReady(kPrefillHttpPort, 200, seconds(10)));
  const Outcome o =
      Classify(HttpPost(kPrefillHttpPort, "/v1/completions",
                        CompletionBody("Mary went to the garden. Where is Mary?", 4, false)));
  CHECK(o.completed());
  StopAllAndCheck({fixed.process.get(), prefill.process.get()});
}

}  // namespace scd::testing
