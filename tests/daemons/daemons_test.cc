// The daemon pair end to end: real scd-prefill and scd-decode processes on loopback,
// driven over HTTP/SSE and gRPC. What is served must equal the offline codec path; bad input
// gets a 4xx/INVALID_ARGUMENT with a message; /metrics passes promtool; SIGTERM drains.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "proto/scd.grpc.pb.h"
#include "tests/daemons/daemon_harness.h"
#include "tests/daemons/reference.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;

std::string CompletionBody(const std::string& prompt, int max_tokens, bool stream,
                           const std::string& model = "stories260K-babi-qa") {
  json b = {{"model", model},
            {"prompt", prompt},
            {"max_tokens", max_tokens},
            {"temperature", 0},
            {"stream", stream}};
  if (stream) b["stream_options"] = {{"include_usage", true}};
  return b.dump();
}

std::string ErrorMessage(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("error")) return "";
  return j["error"].value("message", "");
}

std::string PromtoolCheck(const std::string& exposition, int* rc) {
  const std::string path = TempDir() + "/metrics.txt";
  std::ofstream(path) << exposition;
  std::string output;
  *rc = RunCommand("promtool check metrics < '" + path + "'", &output);
  return output;
}

const char kStory[] =
    "Mary moved to the bathroom. John went to the hallway. Daniel went back to the hallway. "
    "Sandra moved to the garden. John moved to the office. Sandra journeyed to the bathroom. "
    "Mary moved to the hallway. Daniel travelled to the office. ";

// Before any decode daemon: live, not ready, and requests fail fast with 503.
void CheckWithoutDecodeDaemon(int port) {
  CHECK(HttpGet(port, "/health").status == 200);
  HttpResult not_ready = HttpGet(port, "/ready");
  CHECK(not_ready.status == 503);
  CHECK(ErrorMessage(not_ready.body).find("stories260K-babi-qa") != std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  HttpResult fast = HttpPost(port, "/v1/completions", CompletionBody("Mary went", 4, false));
  CHECK(fast.status == 503);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK(ErrorMessage(fast.body).find("no decode daemon") != std::string::npos);
}

// /v1/models lists the one model served.
void CheckModelList(int port) {
  HttpResult models = HttpGet(port, "/v1/models");
  REQUIRE(models.status == 200);
  json j = json::parse(models.body);
  REQUIRE(j["data"].size() == 1);
  CHECK(j["data"][0]["id"] == "stories260K-babi-qa");
}

// Streaming completion: equals the offline codec path, token for token.
void CheckStreamingCompletion(int port) {
  const std::string prompt = std::string(kStory) + "Where is Mary?";
  ReferenceOutput ref = ReferenceGreedy("scd", prompt, 24);
  SseResult s = HttpStream(port, "/v1/completions", CompletionBody(prompt, 24, true));
  REQUIRE(s.status == 200);
  REQUIRE(s.done());
  CHECK(s.Text() == ref.text);
  // include_usage: the last chunk before [DONE] has empty choices and the usage.
  json usage = json::parse(s.events[s.events.size() - 2]);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["prompt_tokens"] == static_cast<int>(ref.prompt.size()));
  CHECK(usage["usage"]["completion_tokens"] == static_cast<int>(ref.generated.size()));
}

// Non-streaming chat completion.
void CheckChatCompletion(int port) {
  json body = {{"model", "stories260K-babi-qa"},
               {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
               {"max_tokens", 8},
               {"temperature", 0}};
  HttpResult r = HttpPost(port, "/v1/chat/completions", body.dump());
  REQUIRE(r.status == 200);
  CHECK(!r.headers["x-request-id"].empty());
  json j = json::parse(r.body);
  CHECK(j["object"] == "chat.completion");
  CHECK(j["choices"][0]["message"]["role"] == "assistant");
  CHECK(j["usage"]["completion_tokens"].get<int>() <= 8);
}

// Stop strings end the text before the match, with finish_reason "stop".
void CheckStopStrings(int port) {
  const std::string prompt = std::string(kStory) + "Where is Mary?";
  ReferenceOutput ref = ReferenceGreedy("scd", prompt, 24);
  REQUIRE(ref.text.size() > 6);
  const std::string stop = ref.text.substr(3, 3);
  json body = json::parse(CompletionBody(prompt, 24, false));
  body["stop"] = stop;
  HttpResult r = HttpPost(port, "/v1/completions", body.dump());
  REQUIRE(r.status == 200);
  json j = json::parse(r.body);
  CHECK(j["choices"][0]["text"] == ref.text.substr(0, ref.text.find(stop)));
  CHECK(j["choices"][0]["finish_reason"] == "stop");
}

// Bad input: each a 4xx with a message, and the daemon keeps serving.
void CheckBadHttpInput(int port) {
  HttpResult malformed = HttpPost(port, "/v1/completions", "{\"model\": ");
  CHECK(malformed.status == 400);
  CHECK(!ErrorMessage(malformed.body).empty());
  HttpResult bad_field = HttpPost(
      port, "/v1/completions", R"({"model":"stories260K-babi-qa","prompt":"x","max_tokens":-3})");
  CHECK(bad_field.status == 400);
  CHECK(ErrorMessage(bad_field.body).find("max_tokens") != std::string::npos);
  HttpResult unknown = HttpPost(port, "/v1/completions", CompletionBody("Hi", 4, false, "gpt-9"));
  CHECK(unknown.status == 404);
  CHECK(ErrorMessage(unknown.body).find("gpt-9") != std::string::npos);
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "Mary went to the garden. ";
  HttpResult too_long = HttpPost(port, "/v1/completions", CompletionBody(long_prompt, 4, true));
  CHECK(too_long.status == 400);
  CHECK(ErrorMessage(too_long.body).find("maximum context length") != std::string::npos);
}

// gRPC Generate: streamed deltas, request id, timings; errors as status codes.
void CheckGrpcGenerate(const PrefillHandle& prefill, const DecodeHandle& decode) {
  scd::v1::GenerateRequest req;
  req.set_model("stories260K-babi-qa");
  req.set_prompt(std::string(kStory) + "Where is Mary?");
  req.set_max_tokens(24);
  req.mutable_sampling()->set_temperature(0);
  GrpcOutcome g = GrpcGenerate(prefill.grpc_address, req);
  REQUIRE(g.status.ok());
  CHECK(!g.request_id.empty());
  CHECK(g.text == ReferenceGreedy("scd", req.prompt(), 24).text);
  REQUIRE(g.events.back().has_done());
  const auto& done = g.events.back().done();
  CHECK(done.request_id() == g.request_id);
  CHECK(done.decode_instance() == decode.instance_id);
  CHECK(done.timings().payload_bytes() > 0);
  CHECK(done.timings().rebuild_ms() > 0);
  CHECK((done.timings().prefill_ms() > 0 || done.timings().prefix_cache_hit()));
  // The time to first token covers every stage before the first token, sequential here.
  const scd::v1::Timings& t = done.timings();
  CHECK(t.ttft_ms() >= t.queue_ms() + t.prefill_ms() + t.encode_ms() + t.transfer_ms() +
                           t.rebuild_ms() + t.suffix_prefill_ms());

  scd::v1::GenerateRequest bad;
  bad.set_model("stories260K-babi-qa");
  CHECK(GrpcGenerate(prefill.grpc_address, bad).status.error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);
  bad.set_prompt("hello");
  bad.set_model("nope");
  CHECK(GrpcGenerate(prefill.grpc_address, bad).status.error_code() == grpc::StatusCode::NOT_FOUND);
}

// The same bad field is refused in the same words through HTTP and gRPC.
void CheckSameRefusalOverHttpAndGrpc(int port, const std::string& grpc_address) {
  struct Case {
    json field;                                          // the HTTP body's field
    std::function<void(scd::v1::GenerateRequest*)> set;  // the same in gRPC
  };
  const std::vector<Case> cases = {
      {{{"max_tokens", -3}}, [](auto* r) { r->set_max_tokens(-3); }},
      {{{"max_tokens", 100000}}, [](auto* r) { r->set_max_tokens(100000); }},
      {{{"temperature", 3}}, [](auto* r) { r->mutable_sampling()->set_temperature(3); }},
      {{{"top_p", 0}}, [](auto* r) { r->mutable_sampling()->set_top_p(0); }},
      {{{"top_k", -2}}, [](auto* r) { r->mutable_sampling()->set_top_k(-2); }},
      {{{"stop", {"a", "b", "c", "d", "e"}}},
       [](auto* r) {
         for (const char* s : {"a", "b", "c", "d", "e"}) r->add_stop(s);
       }},
      {{{"stop", {"a", ""}}},
       [](auto* r) {
         r->add_stop("a");
         r->add_stop("");
       }},
  };
  for (const Case& c : cases) {
    json body = {{"model", "stories260K-babi-qa"}, {"prompt", "Where is Mary?"}};
    body.update(c.field);
    HttpResult http = HttpPost(port, "/v1/completions", body.dump());
    scd::v1::GenerateRequest req;
    req.set_model("stories260K-babi-qa");
    req.set_prompt("Where is Mary?");
    c.set(&req);
    GrpcOutcome g = GrpcGenerate(grpc_address, req);
    INFO(body.dump() << " -> " << http.body);
    CHECK(http.status == 400);
    CHECK(g.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(g.status.error_message() == ErrorMessage(http.body));
  }
}

// Shared prefix: a second question about the same story reuses the cached codes.
void CheckSharedPrefix(int port, const std::string& grpc_address) {
  scd::v1::GenerateRequest a;
  a.set_model("stories260K-babi-qa");
  a.set_prompt(std::string(kStory) + "Where is Sandra?");
  a.set_max_tokens(4);
  a.mutable_sampling()->set_temperature(0);
  scd::v1::GenerateRequest b = a;
  b.set_prompt(std::string(kStory) + "Where is John?");
  GrpcOutcome first = GrpcGenerate(grpc_address, a);
  GrpcOutcome second = GrpcGenerate(grpc_address, b);
  REQUIRE(first.status.ok());
  REQUIRE(second.status.ok());
  CHECK(second.events.back().done().timings().prefix_cache_hit());
  CHECK(second.events.back().done().timings().prefill_ms() == 0);
  const std::string metrics = HttpGet(port, "/metrics").body;
  CHECK(MetricValue(metrics, "scd_prefix_cache_hits_total{model=\"stories260K-babi-qa\"}")
            .value_or(0) >= 1);
}

// /metrics on both daemons passes promtool and carries the documented series.
void CheckMetrics(int port, int decode_port) {
  const std::string metrics = HttpGet(port, "/metrics").body;
  // Each daemon's info series names its backend and device.
  CHECK(metrics.find("scd_prefill_backend_info{backend=\"cpu\",device=\"host CPU (") !=
        std::string::npos);
  CHECK(HttpGet(decode_port, "/metrics")
            .body.find("scd_decode_backend_info{backend=\"cpu\",device=\"host CPU (") !=
        std::string::npos);
  for (const char* name :
       {"scd_time_to_first_token_seconds_bucket", "scd_inter_token_latency_seconds_bucket",
        "scd_transfer_seconds_bucket", "scd_payload_bytes_bucket", "scd_requests_total",
        "scd_request_errors_total", "scd_patch_layer_uses_total"}) {
    INFO(name);
    CHECK(metrics.find(name) != std::string::npos);
  }
  std::string dummy;
  if (RunCommand("command -v promtool", &dummy) == 0) {
    int rc = 0;
    std::string out = PromtoolCheck(metrics, &rc);
    INFO(out);
    CHECK(rc == 0);
    out = PromtoolCheck(HttpGet(decode_port, "/metrics").body, &rc);
    INFO(out);
    CHECK(rc == 0);
  } else {
    WARN("promtool is not installed (Debian package prometheus); skipping the lint");
  }
}

// Every series family either daemon exports is named in docs/CONFIG.md.
void CheckMetricFamiliesDocumented(int port, int decode_port) {
  const std::string docs = ReadFileOrFail(SourceFile("docs/CONFIG.md"));
  for (const int daemon_port : {port, decode_port}) {
    std::istringstream lines(HttpGet(daemon_port, "/metrics").body);
    int families = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("# HELP ", 0) != 0) continue;
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      ++families;
      INFO("port " << daemon_port << ": " << name);
      CHECK(docs.find("`" + name) != std::string::npos);
    }
    CHECK(families >= 15);
  }
}

}  // namespace

TEST_CASE("Daemon pair serves the bundled pair end to end", "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  const int port = prefill.http_port;

  CheckWithoutDecodeDaemon(port);

  DecodeHandle decode = StartDecode(dir, DecodeConfig(prefill.grpc_address));
  REQUIRE(WaitForReady(port, 200, std::chrono::seconds(10)));
  REQUIRE(WaitForReady(decode.http_port, 200, std::chrono::seconds(10)));
  CheckModelList(port);
  CheckStreamingCompletion(port);
  CheckChatCompletion(port);
  CheckStopStrings(port);
  CheckBadHttpInput(port);
  CheckGrpcGenerate(prefill, decode);
  CheckSameRefusalOverHttpAndGrpc(port, prefill.grpc_address);
  CheckSharedPrefix(port, prefill.grpc_address);
  CheckMetrics(port, decode.http_port);
  CheckMetricFamiliesDocumented(port, decode.http_port);
  // SIGTERM: both drain and exit 0.
  decode.process->Signal(SIGTERM);
  CHECK(decode.process->Wait(std::chrono::seconds(15)) == std::optional<int>(0));
  REQUIRE(WaitForReady(port, 503, std::chrono::seconds(5)));
  prefill.process->Signal(SIGTERM);
  CHECK(prefill.process->Wait(std::chrono::seconds(15)) == std::optional<int>(0));
}

}  // namespace scd::testing

namespace scd::testing {

TEST_CASE("The decode daemon prefills a prompt and rebuilds a payload in chunks, and counts them",
          "[daemons]") {
  const std::string dir = TempDir();
  for (const std::string mode : {"oracle", "scd"}) {
    INFO("mode " << mode);
    PrefillHandle prefill = StartPrefill(dir, PrefillConfig(mode), "prefill-" + mode);
    json dc = DecodeConfig(prefill.grpc_address);
    dc["engine"]["prefill_chunk"] = 8;
    dc["engine"]["rebuild_chunk"] = 8;
    // Room for the KV cache of 230 positions (1280 bytes each on this model, in float).
    dc["engine"]["kv_budget_bytes"] = 230 * 1280;
    DecodeHandle decode = StartDecode(dir, dc, "decode-" + mode);
    REQUIRE(WaitForReady(prefill.http_port, 200, std::chrono::seconds(10)));
    const std::string prompt = std::string(kStory) + "Where is Sandra?";
    const ReferenceOutput ref = ReferenceGreedy(mode, prompt, 12);
    SseResult s =
        HttpStream(prefill.http_port, "/v1/completions", CompletionBody(prompt, 12, true));
    REQUIRE(s.status == 200);
    REQUIRE(s.done());
    CHECK(s.Text() == ref.text);  // chunks of 8 give what one piece gives
    // An oracle payload holds the prompt but its last token, which comes as the suffix: the
    // decode daemon prefills every prompt token, the payload's in chunks of 8, then the
    // suffix. An scd payload covers the prompt's whole 16-token blocks but its last token
    // (reference.cc): rebuilt 8 rows at a time, then the rest prefilled in chunks of 8.
    const double t = static_cast<double>(ref.prompt.size());
    const double rows = mode == "oracle" ? 0 : std::floor((t - 1) / 16) * 16;
    const double tokens = t - rows;
    const double chunks = mode == "oracle" ? std::ceil((t - 1) / 8) + 1 : std::ceil(tokens / 8);
    std::string body;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    do {  // the counters and the gauges follow the engine within their 100 ms sampling (one
          // tick may read a gauge before the request started and the counters after; the
          // request's KV reservation goes when the engine drops it, after its last event)
      body = HttpGet(decode.http_port, "/metrics").body;
      if (MetricValue(body, "scd_decode_prefill_tokens_total") == std::optional<double>(tokens) &&
          MetricValue(body, "scd_decode_starting_requests") == std::optional<double>(0) &&
          MetricValue(body, "scd_decode_kv_reserved_bytes") == std::optional<double>(0)) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < until);
    INFO(body);
    CHECK(MetricValue(body, "scd_decode_prefill_tokens_total") == std::optional<double>(tokens));
    CHECK(MetricValue(body, "scd_decode_prefill_chunks_total") == std::optional<double>(chunks));
    CHECK(MetricValue(body, "scd_decode_rebuild_rows_total") == std::optional<double>(rows));
    CHECK(MetricValue(body, "scd_decode_rebuild_chunks_total") == std::optional<double>(rows / 8));
    CHECK(MetricValue(body, "scd_decode_starting_requests") == std::optional<double>(0));
    CHECK(MetricValue(body, "scd_decode_kv_budget_bytes") == std::optional<double>(230 * 1280));
    CHECK(MetricValue(body, "scd_decode_kv_reserved_bytes") == std::optional<double>(0));
    CHECK(MetricValue(body, "scd_decode_kv_waits_total") == std::optional<double>(0));
    // The CPU backend takes no scratch memory at start, and the codec rebuilds on the host.
    for (const char* part : {"backend", "scd_rebuild"}) {
      for (const char* memory : {"device", "pinned_host"}) {
        const std::string series = std::string("scd_decode_scratch_bytes{part=\"") + part +
                                   "\",memory=\"" + memory + "\"}";
        INFO(series);
        CHECK(MetricValue(body, series) == std::optional<double>(0));
      }
    }
    // A request whose cache could never fit the budget is refused with the reason.
    const HttpResult refused =
        HttpPost(prefill.http_port, "/v1/completions", CompletionBody(prompt, 300, false));
    CHECK(refused.status == 429);
    CHECK(refused.body.find("whole KV budget") != std::string::npos);
  }
}

TEST_CASE("The pair serves over the UCX data plane and in a baseline mode", "[daemons][ucx]") {
  const std::string dir = TempDir();
  for (const std::string mode : {"scd", "quant4"}) {
    json pc = PrefillConfig(mode);
    pc["data_plane"] = {{"transport", "ucx"}, {"ucx_transports", "tcp,self"}};
    PrefillHandle prefill = StartPrefill(dir, pc, "prefill-" + mode);
    json dc = DecodeConfig(prefill.grpc_address);
    dc["data_plane"] = {
        {"transport", "ucx"}, {"listen", "127.0.0.1:0"}, {"ucx_transports", "tcp,self"}};
    DecodeHandle decode = StartDecode(dir, dc, "decode-" + mode);
    REQUIRE(WaitForReady(prefill.http_port, 200, std::chrono::seconds(10)));
    const std::string prompt = std::string(kStory) + "Where is Daniel?";
    SseResult s =
        HttpStream(prefill.http_port, "/v1/completions", CompletionBody(prompt, 16, true));
    INFO("mode " << mode);
    REQUIRE(s.status == 200);
    CHECK(s.done());
    CHECK(s.Text() == ReferenceGreedy(mode, prompt, 16).text);
    CHECK(decode.process->LogText().find("ucx://") != std::string::npos);
  }
}

}  // namespace scd::testing

namespace scd::testing {

TEST_CASE("The pair serves with int8 weights on both sides, as the int8 reference does",
          "[daemons]") {
  const std::string dir = TempDir();
  json pc = PrefillConfig("scd");
  pc["weights"] = {{"dtype", "int8"}};
  PrefillHandle prefill = StartPrefill(dir, pc);
  json dc = DecodeConfig(prefill.grpc_address);
  dc["weights"] = {{"dtype", "int8"}};
  DecodeHandle decode = StartDecode(dir, dc);
  REQUIRE(WaitForReady(prefill.http_port, 200, std::chrono::seconds(10)));
  for (const std::string question : {"Where is Daniel?", "Where is Sandra?"}) {
    const std::string prompt = std::string(kStory) + question;
    SseResult s =
        HttpStream(prefill.http_port, "/v1/completions", CompletionBody(prompt, 16, true));
    INFO(question);
    REQUIRE(s.status == 200);
    CHECK(s.done());
    CHECK(s.Text() == ReferenceGreedy("scd", prompt, 16, WeightDtype::kInt8).text);
  }
  CHECK(prefill.process->LogText().find("weights int8") != std::string::npos);
  CHECK(decode.process->LogText().find("weights int8") != std::string::npos);
}

TEST_CASE("scd-loadgen drives the real daemons and accounts for every request", "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, PrefillConfig("scd"));
  DecodeHandle a = StartDecode(dir, DecodeConfig(prefill.grpc_address), "decode-a");
  DecodeHandle b = StartDecode(dir, DecodeConfig(prefill.grpc_address), "decode-b");
  REQUIRE(WaitForReady(prefill.http_port, 200, std::chrono::seconds(10)));
  const std::string prompts = dir + "/prompts.jsonl";
  std::ofstream(prompts) << json({{"context", kStory},
                                  {"questions", {"Q: Where is Mary? A:", "Q: Where is John? A:"}}})
                                .dump()
                         << "\n";
  const std::string out = dir + "/loadgen.json";
  std::string log;
  const int rc = RunCommand(
      BinaryPath("scd-loadgen") + " --url http://127.0.0.1:" + std::to_string(prefill.http_port) +
          " --model stories260K-babi-qa --concurrency 3 --requests 12 --completions"
          " --max-tokens 4 --prompts " +
          prompts + " --json " + out + " --png none --quiet",
      &log);
  INFO(log);
  REQUIRE(rc == 0);
  json j = json::parse(ReadFileOrFail(out));
  CHECK(j["requests"]["issued"] == 12);
  CHECK(j["requests"]["ok"] == 12);
  CHECK(j["requests"]["lost"] == 0);
  CHECK(j["ttft_ms"]["p50"].get<double>() > 0);
  CHECK(j["throughput"]["output_tokens_per_s"].get<double>() > 0);
}

}  // namespace scd::testing
