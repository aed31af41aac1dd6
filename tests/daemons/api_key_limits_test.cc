// Per-API-key limits at the prefill daemon's front doors (prefill_server/api_keys.h), against
// the real pair: several keys beside the legacy http.api_key, each limited on its own.
//   - Rate: a key with a burst of 3 and a rate so small that no token comes back during the
//     test gets three requests, then 429 with a Retry-After that matches its bucket (and gRPC
//     RESOURCE_EXHAUSTED with the same retry-after trailer).
//   - Concurrency: the decode daemon is stopped (SIGSTOP), so that admitted streams stay open
//     for as long as the test needs; with max_concurrent streams open the next request is
//     refused at once (429, Retry-After 1; RESOURCE_EXHAUSTED), and a slot comes back when a
//     request ends however it ends: an HTTP client gone, a gRPC call cancelled, a stream
//     finished (once the decode daemon runs again), a request refused for a bad field.
//   - Isolation: keys at their limits leave the others' requests untouched.
// A slot given back by a client going away is awaited by polling /metrics with a deadline (the
// server notices at its next write); every other check follows from what the client saw.
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/scd.grpc.pb.h"
#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;

constexpr char kKeyA[] = "sk-team-a-0123456789";    // max_concurrent 2
constexpr char kKeyB[] = "sk-team-b-0123456789";    // max_concurrent 1
constexpr char kKeyR[] = "sk-team-r-0123456789";    // burst 3 at 0.001 requests/s
constexpr char kLegacy[] = "sk-legacy-0123456789";  // http.api_key: no limits
constexpr double kRate = 0.001;

std::string Body(int max_tokens, bool stream) {
  return json{{"model", kModel},
              {"prompt", "Mary moved to the bathroom. Q: Where is Mary? A:"},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", stream}}
      .dump();
}

HttpResult Post(int port, const std::string& key, const std::string& body) {
  return HttpPost(port, "/v1/completions", body, {{"Authorization", "Bearer " + key}});
}

int Seconds(const std::string& text) {
  int seconds = 0;
  return absl::SimpleAtoi(text, &seconds) ? seconds : -1;
}

std::string Header(const HttpResult& r, const std::string& name) {
  auto it = r.headers.find(name);
  return it != r.headers.end() ? it->second : "";
}

// A 429 for the key's limit: the OpenAI error body, and Retry-After in whole seconds.
int CheckLimited(const HttpResult& r) {
  INFO(r.body);
  CHECK(r.status == 429);
  CHECK(ErrorOf(r.body)["code"] == "rate_limit_exceeded");
  CHECK(ErrorOf(r.body)["type"] == "rate_limit_error");
  return Seconds(Header(r, "retry-after"));
}

std::string InFlight(const std::string& key) {
  return absl::StrCat("scd_api_key_in_flight{key=\"", key, "\"}");
}

std::string Limited(const std::string& key, const std::string& reason) {
  return absl::StrCat("scd_api_key_limited_total{key=\"", key, "\",reason=\"", reason, "\"}");
}

// Polls /metrics until `series` reads `value` (up to 15 s): for a slot that a vanished client
// gives back once the server notices, at its next write.
bool WaitForMetric(int port, const std::string& series, double value) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < until) {
    if (ScrapeMetric(port, series) == std::optional<double>(value)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A streaming completion held open on its own thread: its status is known as soon as the
// response head arrives; it ends when the server ends it or the client disconnects.
class HeldStream {
 public:
  HeldStream(int port, std::string key) : client_("127.0.0.1", port) {
    client_.set_read_timeout(std::chrono::seconds(60));
    thread_ = std::thread([this, key = std::move(key)] { Run(key); });
  }
  ~HeldStream() {
    Disconnect();
    if (thread_.joinable()) thread_.join();
  }

  // The response's status once its head arrived; 0 when none came within 10 s.
  int WaitStatus() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, std::chrono::seconds(10), [&] { return status_ != 0 || ended_; });
    return status_;
  }
  // Closes the connection: the client goes away.
  void Disconnect() { client_.stop(); }
  // Waits for the end; true when the stream ended with [DONE].
  bool Join() {
    thread_.join();
    return body_.find("data: [DONE]") != std::string::npos;
  }

 private:
  void Run(const std::string& key) {
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = Body(200, /*stream=*/true);
    req.set_header("Content-Type", "application/json");
    req.set_header("Authorization", "Bearer " + key);
    req.response_handler = [this](const httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = res.status;
      changed_.notify_all();
      return true;
    };
    req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
      body_.append(data, n);
      return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    client_.send(req, res, error);
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    changed_.notify_all();
  }

  httplib::Client client_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable changed_;
  int status_ = 0;
  bool ended_ = false;
  std::string body_;  // written by the thread only, read after Join
};

scd::v1::GenerateRequest GrpcRequest(int max_tokens) {
  scd::v1::GenerateRequest r;
  r.set_model(kModel);
  r.set_prompt("Mary moved to the bathroom. Q: Where is Mary? A:");
  r.set_max_tokens(max_tokens);
  r.mutable_sampling()->set_temperature(0);
  return r;
}

// A gRPC Generate call with `key` as metadata (or in the api_key field): its status and its
// retry-after trailer ("" when none).
struct GrpcAnswer {
  grpc::Status status;
  std::string retry_after;
};
GrpcAnswer GrpcCall(const std::string& address, const std::string& key, bool key_field = false) {
  auto stub = scd::v1::Generation::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  scd::v1::GenerateRequest request = GrpcRequest(2);
  if (key_field) {
    request.set_api_key(key);
  } else {
    ctx.AddMetadata("authorization", "Bearer " + key);
  }
  auto reader = stub->Generate(&ctx, request);
  scd::v1::GenerateEvent e;
  while (reader->Read(&e)) {
  }
  GrpcAnswer out;
  out.status = reader->Finish();
  const auto& trailers = ctx.GetServerTrailingMetadata();
  if (auto it = trailers.find("retry-after"); it != trailers.end()) {
    out.retry_after = std::string(it->second.data(), it->second.size());
  }
  return out;
}

// A gRPC Generate call held open on its own thread until the server ends it or Cancel.
class HeldGrpc {
 public:
  HeldGrpc(const std::string& address, const std::string& key)
      : stub_(scd::v1::Generation::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ctx_.AddMetadata("authorization", "Bearer " + key);
    thread_ = std::thread([this] {
      auto reader = stub_->Generate(&ctx_, GrpcRequest(200));
      scd::v1::GenerateEvent e;
      while (reader->Read(&e)) {
      }
      status_ = reader->Finish();
    });
  }
  ~HeldGrpc() {
    ctx_.TryCancel();
    if (thread_.joinable()) thread_.join();
  }
  void Cancel() { ctx_.TryCancel(); }
  grpc::Status Join() {
    thread_.join();
    return status_;
  }

 private:
  std::unique_ptr<scd::v1::Generation::Stub> stub_;
  grpc::ClientContext ctx_;
  std::thread thread_;
  grpc::Status status_;
};

// Keys: the legacy one, and three limited ones.
json LimitedConfig() {
  // Payloads inside the Decode call: an admitted request then waits in that call while the
  // decode daemon is stopped, where the pipeline sees its client go away (a data-plane
  // transfer would wait for its acknowledgement instead, up to data_plane.peer_timeout).
  json pc = PrefillConfig("oracle");
  pc["data_plane"]["inline_max_bytes"] = 32 << 20;
  pc["http"]["api_key"] = kLegacy;
  pc["http"]["api_keys"] = json::array({
      {{"name", "team-a"}, {"key", kKeyA}, {"max_concurrent", 2}},
      {{"name", "team-b"}, {"key", kKeyB}, {"max_concurrent", 1}},
      {{"name", "team-r"}, {"key", kKeyR}, {"requests_per_s", kRate}, {"burst", 3}},
  });
  // The decode daemon stays registered while it is stopped.
  pc["control_plane"]["lease"] = "60s";
  return pc;
}

// Burst, then 429 with the bucket's Retry-After on both APIs; other keys unaffected.
void CheckRate(const PrefillHandle& prefill) {
  const int port = prefill.http_port;
  const auto burst_start = std::chrono::steady_clock::now();
  // The least Retry-After the bucket can give now: a token takes 1/kRate = 1000 s, less the
  // seconds since the burst began (what has come back since).
  auto least = [&] {
    const double since =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - burst_start).count();
    return static_cast<int>(1 / kRate) - static_cast<int>(std::ceil(since));
  };
  for (int i = 0; i < 3; ++i) CHECK(Post(port, kKeyR, Body(1, false)).status == 200);
  const int retry_after = CheckLimited(Post(port, kKeyR, Body(1, false)));
  CHECK(retry_after <= 1000);
  CHECK(retry_after >= least());
  const GrpcAnswer g = GrpcCall(prefill.grpc_address, kKeyR);
  CHECK(g.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(Seconds(g.retry_after) <= 1000);
  CHECK(Seconds(g.retry_after) >= least());
  // The other keys are untouched.
  CHECK(Post(port, kKeyA, Body(1, false)).status == 200);
  CHECK(Post(port, kLegacy, Body(1, false)).status == 200);
  CHECK(GrpcCall(prefill.grpc_address, kKeyB).status.ok());
  CHECK(ScrapeMetric(port, Limited("team-r", "rate")) == std::optional<double>(2));
  CHECK(ScrapeMetric(port, Limited("team-a", "rate")) == std::optional<double>(0));
}

// Unknown keys: 401 and UNAUTHENTICATED, as with one key.
void CheckUnknownKey(const PrefillHandle& prefill) {
  const HttpResult r = Post(prefill.http_port, "sk-unknown", Body(1, false));
  CHECK(r.status == 401);
  CHECK(ErrorOf(r.body)["code"] == "invalid_api_key");
  CHECK(HttpPost(prefill.http_port, "/v1/completions", Body(1, false)).status == 401);
  CHECK(GrpcCall(prefill.grpc_address, "sk-unknown").status.error_code() ==
        grpc::StatusCode::UNAUTHENTICATED);
}

// With team-a's two slots held: a third team-a request is refused on both APIs, streaming or
// not, while team-b keeps its own slot and limit.
void CheckAtConcurrencyLimit(int port, const std::string& grpc_address) {
  {
    INFO("team-a at max_concurrent: refused at once on both APIs, streaming or not");
    HeldStream s3(port, kKeyA);
    CHECK(s3.WaitStatus() == 429);
    CHECK_FALSE(s3.Join());
    CHECK(CheckLimited(Post(port, kKeyA, Body(1, false))) == 1);
    const GrpcAnswer g = GrpcCall(grpc_address, kKeyA);
    CHECK(g.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(g.retry_after == "1");
    CHECK(GrpcCall(grpc_address, kKeyA, /*key_field=*/true).status.error_code() ==
          grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    INFO("team-b has its own slot, and its own limit");
    HeldStream b(port, kKeyB);
    CHECK(b.WaitStatus() == 200);
    CHECK(CheckLimited(Post(port, kKeyB, Body(1, false))) == 1);
    b.Disconnect();
    CHECK(WaitForMetric(port, InFlight("team-b"), 0));
  }
}

// Counted once per refusal, by key and reason; nothing else was limited.
void CheckLimitCounts(int port) {
  CHECK(ScrapeMetric(port, Limited("team-a", "concurrency")) == std::optional<double>(5));
  CHECK(ScrapeMetric(port, Limited("team-b", "concurrency")) == std::optional<double>(1));
  CHECK(ScrapeMetric(port, Limited("team-r", "rate")) == std::optional<double>(2));
  CHECK(ScrapeMetric(port, Limited("default", "concurrency")) == std::optional<double>(0));
  for (const char* key : {"default", "team-a", "team-b", "team-r"}) {
    CHECK(ScrapeMetric(port, InFlight(key)) == std::optional<double>(0));
  }
}

}  // namespace

TEST_CASE("Per-key limits: rate, concurrency, isolation, slots back however requests end",
          "[daemons]") {
  const std::string dir = TempDir();
  PrefillHandle prefill = StartPrefill(dir, LimitedConfig());
  DecodeHandle decode = StartDecode(dir, DecodeConfig(prefill.grpc_address));
  REQUIRE(WaitForReady(prefill.http_port, 200, std::chrono::seconds(10)));
  const int port = prefill.http_port;
  const std::string& grpc_address = prefill.grpc_address;
  for (const char* key : {"default", "team-a", "team-b", "team-r"}) {
    CHECK(ScrapeMetric(port, InFlight(key)) == std::optional<double>(0));
  }
  CheckUnknownKey(prefill);
  CheckRate(prefill);

  // Streams admitted now wait in their Decode calls until the decode daemon runs again.
  decode.process->Signal(SIGSTOP);
  auto s1 = std::make_unique<HeldStream>(port, kKeyA);
  auto s2 = std::make_unique<HeldStream>(port, kKeyA);
  REQUIRE(s1->WaitStatus() == 200);
  REQUIRE(s2->WaitStatus() == 200);
  CHECK(ScrapeMetric(port, InFlight("team-a")) == std::optional<double>(2));
  CheckAtConcurrencyLimit(port, grpc_address);
  {
    INFO("an HTTP client gone gives its slot back; a new stream is then admitted");
    s1->Disconnect();
    CHECK(WaitForMetric(port, InFlight("team-a"), 1));
    s1.reset();
  }
  HeldStream s4(port, kKeyA);
  REQUIRE(s4.WaitStatus() == 200);
  CHECK(ScrapeMetric(port, InFlight("team-a")) == std::optional<double>(2));
  {
    INFO("a cancelled gRPC call gives its slot back");
    s2->Disconnect();
    REQUIRE(WaitForMetric(port, InFlight("team-a"), 1));
    s2.reset();
    HeldGrpc held(grpc_address, kKeyA);
    REQUIRE(WaitForMetric(port, InFlight("team-a"), 2));
    CHECK(GrpcCall(grpc_address, kKeyA).status.error_code() ==
          grpc::StatusCode::RESOURCE_EXHAUSTED);
    held.Cancel();
    CHECK(held.Join().error_code() == grpc::StatusCode::CANCELLED);
    CHECK(WaitForMetric(port, InFlight("team-a"), 1));
  }
  {
    INFO("a finished stream has given its slot back by the time its client read [DONE]");
    decode.process->Signal(SIGCONT);
    CHECK(s4.Join());
    CHECK(ScrapeMetric(port, InFlight("team-a")) == std::optional<double>(0));
  }
  {
    INFO("a request refused for a field, and one answered, give their slots back");
    json bad = json::parse(Body(1, false));
    bad["max_tokens"] = -1;
    CHECK(Post(port, kKeyA, bad.dump()).status == 400);
    CHECK(Post(port, kKeyA, Body(2, false)).status == 200);
    CHECK(GrpcCall(grpc_address, kKeyA).status.ok());
    CHECK(ScrapeMetric(port, InFlight("team-a")) == std::optional<double>(0));
  }
  CheckLimitCounts(port);
}

}  // namespace scd::testing
