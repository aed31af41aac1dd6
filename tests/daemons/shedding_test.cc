// Load shedding end to end (prefill_server/admission.h): a real daemon pair with two decode
// slots gets a burst of streaming requests over HTTP and gRPC, all released at once, far more
// than it can start within limits.max_queue_wait. The daemon must refuse some at once — 429
// with a Retry-After in whole seconds, or RESOURCE_EXHAUSTED with a retry-after trailer, well
// inside max_queue_wait — finish every request it admitted, count the refused ones in
// scd_requests_shed_total, and serve normally once the burst is over.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/scd.grpc.pb.h"
#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kMaxQueueWaitMs = 1000;
constexpr int kTokens = 400;  // long enough that 2 slots start few of a burst within the limit

std::string Prompt(int i) {
  return absl::StrCat("Mary moved to the bathroom. John went to the hallway number ", i,
                      ". Once upon a time, Lily");
}

std::string StreamBody(int i) {
  return json{{"model", kModel},
              {"prompt", Prompt(i)},
              {"max_tokens", kTokens},
              {"temperature", 0},
              {"stream", true}}
      .dump();
}

// One request of the burst, as its client saw it.
struct Shot {
  bool grpc = false;
  bool shed = false;    // 429 / RESOURCE_EXHAUSTED
  bool served = false;  // a complete answer
  int retry_after = 0;  // seconds; 0 when absent or unparsable
  double seconds = 0;   // from sending to the refusal, or to the end of the answer
  std::string detail;
};

int ParseSeconds(const std::string& text) {
  int seconds = 0;
  return absl::SimpleAtoi(text, &seconds) ? seconds : 0;
}

Shot SendHttp(int port, int i) {
  Shot s;
  const auto t0 = Clock::now();
  HttpResult r = HttpPost(port, "/v1/completions", StreamBody(i));
  s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  s.shed = r.status == 429;
  s.retry_after = ParseSeconds(r.headers["retry-after"]);
  const bool done = r.body.find("data: [DONE]") != std::string::npos;
  s.served = r.status == 200 && done && r.body.find("\"error\"") == std::string::npos;
  s.detail = absl::StrCat("HTTP ", r.status, ": ", r.body.substr(0, 300));
  return s;
}

// A channel connected before the burst, so that gRPC requests leave as soon as HTTP ones.
std::shared_ptr<grpc::Channel> ConnectedChannel(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return channel;
}

Shot SendGrpc(const std::shared_ptr<grpc::Channel>& channel, int i) {
  Shot s;
  s.grpc = true;
  auto stub = scd::v1::Generation::NewStub(channel);
  scd::v1::GenerateRequest req;
  req.set_model(kModel);
  req.set_prompt(Prompt(i));
  req.set_max_tokens(kTokens);
  req.mutable_sampling()->set_temperature(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const auto t0 = Clock::now();
  auto reader = stub->Generate(&ctx, req);
  scd::v1::GenerateEvent e;
  bool done = false, error = false;
  while (reader->Read(&e)) {
    done = done || e.has_done();
    error = error || e.has_error();
  }
  const grpc::Status st = reader->Finish();
  s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  s.shed = st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
  s.served = st.ok() && done && !error;
  const auto& trailers = ctx.GetServerTrailingMetadata();
  if (auto it = trailers.find("retry-after"); it != trailers.end()) {
    s.retry_after = ParseSeconds(std::string(it->second.data(), it->second.size()));
  }
  s.detail = absl::StrCat("gRPC ", st.error_code(), ": ", st.error_message());
  return s;
}

// `n` requests over HTTP (even i) and gRPC (odd i): every client thread, once set up, waits for
// one signal, then sends.
std::vector<Shot> Burst(int n, int port, const std::string& grpc_address) {
  std::promise<void> go;
  std::shared_future<void> start = go.get_future().share();
  std::vector<std::promise<void>> ready(n);
  std::vector<std::future<void>> all_ready;
  for (std::promise<void>& r : ready) all_ready.push_back(r.get_future());
  std::vector<std::future<Shot>> futures;
  for (int i = 0; i < n; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      const bool use_grpc = i % 2 == 1;
      std::shared_ptr<grpc::Channel> channel;
      if (use_grpc) channel = ConnectedChannel(grpc_address);
      ready[i].set_value();
      start.wait();
      return use_grpc ? SendGrpc(channel, i) : SendHttp(port, i);
    }));
  }
  for (std::future<void>& r : all_ready) r.wait();
  go.set_value();
  std::vector<Shot> shots;
  for (std::future<Shot>& f : futures) shots.push_back(f.get());
  return shots;
}

}  // namespace

TEST_CASE("Overload: the prefill daemon sheds at once what would wait past max_queue_wait",
          "[daemons]") {
  const std::string dir = TempDir();
  json pc = PrefillConfig("scd");
  pc["limits"]["max_queue_wait"] = absl::StrCat(kMaxQueueWaitMs, "ms");
  pc["http"]["threads"] = 64;
  PrefillHandle prefill = StartPrefill(dir, pc);
  const int port = prefill.http_port;
  json dc = DecodeConfig(prefill.grpc_address);
  dc["engine"] = {{"max_batch", 2}, {"max_queue", 256}};
  DecodeHandle decode = StartDecode(dir, dc);
  REQUIRE(WaitForReady(port, 200, std::chrono::seconds(10)));

  // First admission measures both stages (one request alone), and sees the decode daemon full
  // (a wave of 32 on its 2 slots, a queue for a second or more, which its load reports at the
  // 200 ms heartbeats show). The wave is admitted as long as no report has shown the queue.
  Shot first = SendHttp(port, 1000);
  INFO(first.detail);
  REQUIRE(first.served);
  std::vector<std::future<Shot>> wave;
  for (int i = 0; i < 32; ++i) {
    wave.push_back(std::async(std::launch::async, [port, i] { return SendHttp(port, 1001 + i); }));
  }
  int shed_wave = 0;
  for (std::future<Shot>& f : wave) {
    const Shot s = f.get();
    INFO(s.detail);
    REQUIRE(s.shed != s.served);
    shed_wave += s.shed ? 1 : 0;
  }

  // The burst: 48 at once, far more than 2 slots start within the limit.
  int shed_http = 0, shed_grpc = 0, served = 0;
  for (const Shot& s : Burst(48, port, prefill.grpc_address)) {
    INFO((s.grpc ? "gRPC" : "HTTP") << " after " << s.seconds << " s: " << s.detail);
    CHECK(s.shed != s.served);  // refused, or served to the end: nothing else
    if (s.shed) {
      (s.grpc ? shed_grpc : shed_http) += 1;
      CHECK(s.retry_after >= 1);
      CHECK(s.seconds < kMaxQueueWaitMs / 2 / 1e3);  // refused well inside the limit
      if (s.grpc) CHECK(s.detail.find("limits.max_queue_wait") != std::string::npos);
    }
    served += s.served ? 1 : 0;
  }
  INFO("shed: " << shed_http << " HTTP, " << shed_grpc << " gRPC; served " << served);
  CHECK(shed_http >= 1);
  CHECK(shed_grpc >= 1);
  CHECK(served >= 2);  // at least the two that found a slot free

  // Every refusal is counted, by its reason.
  HttpResult metrics = HttpGet(port, "/metrics");
  REQUIRE(metrics.status == 200);
  CHECK(MetricValue(metrics.body, absl::StrCat("scd_requests_shed_total{model=\"", kModel,
                                               "\",reason=\"queue_wait\"}")) ==
        std::optional<double>(shed_wave + shed_http + shed_grpc));

  // The burst is over: the daemon admits and serves again.
  Shot after = SendHttp(port, 2000);
  INFO(after.detail);
  CHECK(after.served);
  CHECK(decode.process->running());
}

}  // namespace scd::testing
