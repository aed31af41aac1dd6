// Faults and bad configuration around the daemon pair: a
// decode daemon killed mid-request or before one, a client that disconnects mid-stream,
// SIGTERM with a stream in flight, invalid config values, and pairs that must be refused.
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <thread>

#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string StreamBody(int max_tokens) {
  return json({{"model", "stories260K-babi-qa"},
               {"prompt", "Once upon a time"},
               {"max_tokens", max_tokens},
               {"temperature", 0.8},
               {"seed", 3},
               {"stream", true}})
      .dump();
}

// The last event's error message, or "".
std::string StreamError(const SseResult& s) {
  for (auto it = s.events.rbegin(); it != s.events.rend(); ++it) {
    json j = json::parse(*it, nullptr, false);
    if (!j.is_discarded() && j.contains("error")) return j["error"].value("message", "?");
  }
  return "";
}

json SlowDecodeConfig(const std::string& control_plane) {
  json c = DecodeConfig(control_plane);
  c["engine"]["min_step_interval"] = "40ms";  // hold requests mid-stream
  return c;
}

// Two streams of `max_tokens` at once; returns once both have an event (or after 20 s).
std::pair<std::future<SseResult>, std::future<SseResult>> TwoStartedStreams(int port,
                                                                            int max_tokens) {
  auto started = std::make_shared<std::atomic<int>>(0);
  auto run = [=] {
    bool counted = false;
    return HttpStream(port, "/v1/completions", StreamBody(max_tokens), [&](const std::string&) {
      if (!counted) {
        counted = true;
        ++*started;
      }
      return true;
    });
  };
  auto streams =
      std::make_pair(std::async(std::launch::async, run), std::async(std::launch::async, run));
  const auto until = std::chrono::steady_clock::now() + seconds(20);
  while (started->load() < 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(milliseconds(10));
  REQUIRE(started->load() == 2);
  return streams;
}

}  // namespace

TEST_CASE("A decode daemon killed mid-stream: its stream migrates and continues unchanged",
          "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  DecodeHandle a = StartDecode(dir, SlowDecodeConfig(prefill.grpc_address), "decode-a");
  DecodeHandle b = StartDecode(dir, SlowDecodeConfig(prefill.grpc_address), "decode-b");
  REQUIRE(WaitForReady(prefill.http_port, 200, seconds(10)));
  // The undisturbed text of a sampled request (seed 3), then the same request twice at once,
  // one per daemon; daemon A is killed once both have streamed tokens. Its stream resumes on
  // B with the tokens already streamed and the sampler advanced past them.
  const SseResult reference = HttpStream(prefill.http_port, "/v1/completions", StreamBody(120));
  REQUIRE(reference.done());
  REQUIRE(StreamError(reference).empty());
  auto [s1, s2] = TwoStartedStreams(prefill.http_port, 120);
  a.process->Signal(SIGKILL);
  for (SseResult r : {s1.get(), s2.get()}) {
    INFO("error: " << StreamError(r));
    CHECK(r.done());
    CHECK(StreamError(r).empty());
    CHECK(r.Text() == reference.Text());
  }
  const std::string metrics = HttpGet(prefill.http_port, "/metrics").body;
  CHECK(MetricValue(
            metrics,
            "scd_migrations_total{specialist=\"stories260K-babi-qa\",outcome=\"completed\"}") == 1);
}

TEST_CASE("A killed decode daemon fails its stream fast and later requests route around it",
          "[daemons]") {
  const std::string dir = TempDir();
  json pc = PrefillConfig("scd");
  pc["limits"]["migration_limit"] = 0;  // the stream ends with the error instead
  PrefillHandle prefill = StartPrefill(dir, pc);
  DecodeHandle a = StartDecode(dir, SlowDecodeConfig(prefill.grpc_address), "decode-a");
  DecodeHandle b = StartDecode(dir, SlowDecodeConfig(prefill.grpc_address), "decode-b");
  REQUIRE(WaitForReady(prefill.http_port, 200, seconds(10)));

  // Two long streams (least-loaded routing puts one on each daemon); kill daemon A once both
  // have produced tokens. The stream on A must end with an error event, promptly; the one on
  // B must complete.
  auto [s1, s2] = TwoStartedStreams(prefill.http_port, 200);
  const auto killed_at = std::chrono::steady_clock::now();
  a.process->Signal(SIGKILL);
  SseResult r1 = s1.get();
  SseResult r2 = s2.get();
  // A failed stream carries an OpenAI error event (then [DONE], as OpenAI sends it).
  const int failed = (StreamError(r1).empty() ? 0 : 1) + (StreamError(r2).empty() ? 0 : 1);
  CHECK(r1.done());
  CHECK(r2.done());
  CHECK(failed == 1);
  const SseResult& broken = StreamError(r1).empty() ? r2 : r1;
  INFO("error: " << StreamError(broken));
  CHECK(StreamError(broken).find("decode daemon") != std::string::npos);
  // The failed stream ended long before a 200-token stream at 40 ms/token would have.
  CHECK(std::chrono::steady_clock::now() - killed_at < seconds(12));

  // Later requests all succeed on B: the first ones may hit A (quarantined on failure) and
  // are retried; after the lease A is gone from the registry.
  for (int i = 0; i < 4; ++i) {
    SseResult r = HttpStream(prefill.http_port, "/v1/completions", StreamBody(3));
    INFO("request " << i << " error: " << StreamError(r) << " body: " << r.body);
    CHECK(r.status == 200);
    CHECK(r.done());
    CHECK(StreamError(r).empty());
  }
  // Kill B too: /ready turns 503 once its lease runs out, and requests fail fast with 503.
  b.process->Signal(SIGKILL);
  CHECK(WaitForReady(prefill.http_port, 503, seconds(5)));
  const auto t0 = std::chrono::steady_clock::now();
  HttpResult none = HttpPost(prefill.http_port, "/v1/completions", StreamBody(3));
  CHECK(none.status == 503);
  CHECK(std::chrono::steady_clock::now() - t0 < seconds(2));
}

TEST_CASE("A client that disconnects mid-stream frees its decode slot", "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  DecodeHandle d = StartDecode(dir, SlowDecodeConfig(prefill.grpc_address));
  REQUIRE(WaitForReady(prefill.http_port, 200, seconds(10)));
  int seen = 0;
  SseResult r = HttpStream(prefill.http_port, "/v1/completions", StreamBody(300),
                           [&](const std::string&) { return ++seen < 3; });
  CHECK(seen == 3);
  CHECK(!r.done());
  // The decode daemon sees the cancellation and the prefill daemon's request ends.
  std::optional<double> cancelled;
  std::optional<double> in_flight;
  const auto until = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    cancelled = MetricValue(HttpGet(d.http_port, "/metrics").body,
                            "scd_decode_requests_total{outcome=\"cancelled\"}");
    in_flight = MetricValue(HttpGet(prefill.http_port, "/metrics").body, "scd_requests_in_flight");
    if (cancelled.value_or(0) == 1 && in_flight.value_or(1) == 0) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  CHECK(cancelled.value_or(0) == 1);
  CHECK(in_flight.value_or(1) == 0);
  // And the pair keeps serving.
  SseResult after = HttpStream(prefill.http_port, "/v1/completions", StreamBody(2));
  CHECK(after.done());
}

TEST_CASE("SIGTERM lets a stream in flight finish, then the daemon exits 0", "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  DecodeHandle d = StartDecode(dir, SlowDecodeConfig(prefill.grpc_address));
  REQUIRE(WaitForReady(prefill.http_port, 200, seconds(10)));
  std::atomic<bool> first{false};
  auto stream = std::async(std::launch::async, [&] {
    return HttpStream(prefill.http_port, "/v1/completions", StreamBody(30),
                      [&](const std::string&) {
                        first = true;
                        return true;
                      });
  });
  const auto until = std::chrono::steady_clock::now() + seconds(10);
  while (!first.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(milliseconds(5));
  REQUIRE(first.load());
  prefill.process->Signal(SIGTERM);
  d.process->Signal(SIGTERM);
  SseResult r = stream.get();
  CHECK(r.done());
  CHECK(StreamError(r).empty());
  CHECK(prefill.process->Wait(seconds(20)) == std::optional<int>(0));
  CHECK(d.process->Wait(seconds(20)) == std::optional<int>(0));
}

TEST_CASE("Invalid configs and wrong pairs are refused with the reason", "[daemons]") {
  const std::string dir = TempDir();
  auto run_until_exit = [&](const std::string& binary, const json& config, const std::string& tag,
                            std::string* log) { return RunToExit(binary, dir, config, tag, log); };
  std::string log;
  {  // A bad value names the key; exit code 2.
    json c = PrefillConfig();
    c["http"]["port"] = "eighty";
    CHECK(run_until_exit("scd-prefill", c, "bad-port", &log) == std::optional<int>(2));
    CHECK(log.find("http.port") != std::string::npos);
  }
  {  // An unknown key is named, with a suggestion.
    json c = PrefillConfig();
    c["http"]["prot"] = 80;
    CHECK(run_until_exit("scd-prefill", c, "typo", &log) == std::optional<int>(2));
    CHECK(log.find("http.prot") != std::string::npos);
    CHECK(log.find("http.port") != std::string::npos);
  }
  {  // An unknown codec mode.
    json c = PrefillConfig();
    c["specialists"][0]["mode"] = "magic";
    CHECK(run_until_exit("scd-prefill", c, "mode", &log) == std::optional<int>(2));
    CHECK(log.find("specialists[0].mode") != std::string::npos);
  }
  {  // A command-line override wins over the file, and is validated the same way.
    json c = PrefillConfig();
    const std::string path = dir + "/override.json";
    WriteJson(path, c);
    std::unique_ptr<DaemonProcess> p =
        Spawn(BinaryPath("scd-prefill"), {"--config", path, "--limits.max_tokens=0"},
              dir + "/override.log");
    CHECK(p->Wait(seconds(60)) == std::optional<int>(2));
    CHECK(p->LogText().find("limits.max_tokens") != std::string::npos);
  }

  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  {  // The artifact does not fit the consumer model: the decode daemon will not start.
    json c = DecodeConfig(prefill.grpc_address);
    c["model"]["path"] = ModelDir("stories260K-wiki");
    CHECK(run_until_exit("scd-decode", c, "wrong-artifact", &log) == std::optional<int>(1));
    CHECK(log.find("does not fit") != std::string::npos);
  }
  {  // Another consumer registering under the specialist's name: refused by pair digest.
    json c = DecodeConfig(prefill.grpc_address);
    c["model"]["path"] = ModelDir("stories260K-wiki");
    c["model"].erase("artifact");
    c["model"]["producer_path"] = ModelDir("stories260K");
    CHECK(run_until_exit("scd-decode", c, "wrong-pair", &log) == std::optional<int>(1));
    CHECK(log.find("registration refused") != std::string::npos);
    CHECK(log.find("digest") != std::string::npos);
  }
  {  // The wrong cluster token.
    json c = DecodeConfig(prefill.grpc_address);
    c["control_plane"]["cluster_token"] = "guess";
    CHECK(run_until_exit("scd-decode", c, "wrong-token", &log) == std::optional<int>(1));
    CHECK(log.find("registration refused") != std::string::npos);
  }
  // None of them got in.
  CHECK(HttpGet(prefill.http_port, "/ready").status == 503);
}

TEST_CASE("The official openai npm client streams a chat from the real daemons",
          "[daemons][slow]") {
  const std::string client_dir = std::string(SCD_SOURCE_DIR) + "/tests/http/openai_client";
  std::string out;
  if (RunCommand("command -v node", &out) != 0 ||
      RunCommand("test -f '" + client_dir + "/node_modules/openai/package.json'", &out) != 0) {
    WARN("SKIPPED: node or the openai npm client is missing (run `npm ci` in " << client_dir
                                                                               << ")");
    return;
  }
  const std::string dir = TempDir();
  json pc = PrefillConfig("scd");
  pc["http"]["api_key"] = "sk-daemon-test";
  PrefillHandle prefill = StartPrefill(dir, pc);
  DecodeHandle d = StartDecode(dir, DecodeConfig(prefill.grpc_address));
  REQUIRE(WaitForReady(prefill.http_port, 200, seconds(10)));
  auto run = [&](const std::string& key) {
    std::string output;
    const int rc =
        RunCommand("cd '" + client_dir + "' && SCD_OPENAI_BASE_URL=http://127.0.0.1:" +
                       std::to_string(prefill.http_port) + "/v1 SCD_OPENAI_API_KEY=" + key +
                       " SCD_OPENAI_MODEL=stories260K-babi-qa SCD_OPENAI_MAX_TOKENS=12"
                       " timeout 60 node stream_chat.mjs",
                   &output);
    return std::make_pair(rc, output);
  };
  auto [rc, output] = run("sk-daemon-test");
  INFO("node output:\n" << output);
  CHECK(rc == 0);
  CHECK(output.rfind("MODEL stories260K-babi-qa model\nMISSING 404\n", 0) == 0);
  CHECK(output.find("\nUSAGE ") != std::string::npos);
  CHECK(output.find("\nFINISH ") != std::string::npos);
  CHECK(output.find("USAGE undefined") == std::string::npos);
  auto [bad_rc, bad_output] = run("sk-wrong");
  INFO("node output:\n" << bad_output);
  CHECK(bad_rc == 2);
  CHECK(bad_output.rfind("ERROR 401", 0) == 0);
}

}  // namespace scd::testing

namespace scd::testing {

TEST_CASE("Limits: API key, full prefill queue, request deadline", "[daemons]") {
  const std::string dir = TempDir();
  json pc = PrefillConfig("scd");
  pc["http"]["api_key"] = "sk-limits";
  pc["limits"]["prefill_queue"] = 0;       // only the running prefill; nobody waits
  pc["limits"]["request_timeout"] = "1s";  // every request's deadline
  pc["prefix_cache"] = {{"enabled", false}};
  PrefillHandle prefill = StartPrefill(dir, pc);
  DecodeHandle d = StartDecode(dir, SlowDecodeConfig(prefill.grpc_address));
  REQUIRE(WaitForReady(prefill.http_port, 200, seconds(10)));
  const std::map<std::string, std::string> auth = {{"Authorization", "Bearer sk-limits"}};
  const std::string body = json({{"model", "stories260K-babi-qa"},
                                 {"prompt", "Mary went to the garden. John went to the office."},
                                 {"max_tokens", 2},
                                 {"temperature", 0}})
                               .dump();
  {  // No key, or a wrong one: 401 and no work (nothing reaches the decode daemon).
    HttpResult none = HttpPost(prefill.http_port, "/v1/completions", body);
    CHECK(none.status == 401);
    HttpResult wrong =
        HttpPost(prefill.http_port, "/v1/completions", body, {{"Authorization", "Bearer nope"}});
    CHECK(wrong.status == 401);
    CHECK(!MetricValue(HttpGet(prefill.http_port, "/metrics").body,
                       "scd_requests_total{model=\"stories260K-babi-qa\",mode=\"scd\"}")
               .has_value());
    CHECK(HttpGet(prefill.http_port, "/health").status == 200);  // probes need no key
  }
  {  // A burst beyond the prefill queue: some requests get 429 with Retry-After, the rest succeed.
    // A long prompt (about 260 tokens, some 15 ms of prefill each) so that the burst's
    // requests overlap in the producer even on a loaded host.
    json long_prompt = json::parse(body);
    std::string text;
    for (int i = 0; i < 10; ++i) text += "Mary went to the garden. John went to the office. ";
    long_prompt["prompt"] = text;
    const std::string long_body = long_prompt.dump();
    std::vector<std::future<HttpResult>> burst;
    for (int i = 0; i < 12; ++i) {
      burst.push_back(std::async(std::launch::async, [&] {
        return HttpPost(prefill.http_port, "/v1/completions", long_body, auth);
      }));
    }
    int ok = 0, refused = 0;
    for (auto& f : burst) {
      HttpResult r = f.get();
      if (r.status == 200) ++ok;
      if (r.status == 429) {
        ++refused;
        CHECK(r.headers["retry-after"] == "1");
      }
    }
    CHECK(ok >= 1);
    CHECK(refused >= 1);
    CHECK(ok + refused == 12);
  }
  {  // A request that outlives its 1 s deadline (40 ms per token, 200 tokens) ends with an error.
    json slow = json::parse(body);
    slow["max_tokens"] = 200;
    slow["stream"] = true;
    const auto t0 = std::chrono::steady_clock::now();
    httplib::Client client("127.0.0.1", prefill.http_port);
    client.set_read_timeout(seconds(30));
    httplib::Headers h = {{"Authorization", "Bearer sk-limits"}};
    auto res = client.Post("/v1/completions", h, slow.dump(), "application/json");
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(res->body.find("deadline") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < seconds(10));
  }
}

}  // namespace scd::testing
