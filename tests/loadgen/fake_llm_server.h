// Fake servers for the load-generator tests, on real sockets (127.0.0.1, port 0):
//   - FakeLlmServer: the real HttpServer and the real OpenAI request parsing (so every body
//     scd-loadgen sends must be a valid streaming request with include_usage), streaming
//     max_tokens tokens " w0", " w1", ... after a first-token delay, one every token delay.
//     A per-arrival policy makes chosen requests answer 429 or 500, fail mid-stream with an
//     OpenAI error event, or stall (keep-alive comments only) until the client gives up. It
//     keeps every X-Request-Id it issued, to match against the client's records.
//   - DroppingServer: plain cpp-httplib whose stream sends one content chunk and then closes
//     the connection without ending the chunked body: a server crash mid-stream.
#ifndef SCD_TESTS_LOADGEN_FAKE_LLM_SERVER_H_
#define SCD_TESTS_LOADGEN_FAKE_LLM_SERVER_H_

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/http/http_server.h"
#include "common/http/openai_api.h"
#include "common/http/openai_response.h"
#include "common/http/sse.h"

namespace scd::loadgen::testing {

inline constexpr char kFakeModel[] = "fake-model";

enum class FakeBehavior { kStream, kHttp429, kHttp500, kFailMidStream, kStall };

struct FakeLlmOptions {
  std::chrono::milliseconds first_token_delay{0};
  std::chrono::milliseconds token_delay{1};
  std::chrono::milliseconds sse_keepalive{50};
  int num_threads = 64;
  // What request number `arrival` (1-based, in order of arrival) gets; empty: always kStream.
  std::function<FakeBehavior(int arrival)> behavior;
};

class FakeLlmServer {
 public:
  explicit FakeLlmServer(FakeLlmOptions options = {}) : options_(std::move(options)) {
    http::HttpServerOptions server_options;
    server_options.sse_keepalive = options_.sse_keepalive;
    server_options.num_threads = options_.num_threads;
    absl::StatusOr<std::unique_ptr<http::HttpServer>> server =
        http::HttpServer::Create(server_options);
    if (!server.ok()) throw std::runtime_error(server.status().ToString());
    server_ = std::move(*server);
    server_->Post("/v1/chat/completions",
                  [this](const http::HttpRequest& req, http::HttpResponse& res) {
                    absl::StatusOr<http::ChatCompletionRequest> parsed =
                        http::ParseChatCompletionRequest(req.body(), limits_);
                    if (!parsed.ok()) return res.SetError(parsed.status());
                    size_t prompt_bytes = 0;
                    for (const auto& m : parsed->messages) prompt_bytes += m.content.size();
                    Serve(req, http::ApiKind::kChatCompletion, parsed->model, parsed->stream,
                          parsed->include_usage, prompt_bytes, parsed->sampling.max_tokens, res);
                  });
    server_->Post("/v1/completions", [this](const http::HttpRequest& req, http::HttpResponse& res) {
      absl::StatusOr<http::CompletionRequest> parsed =
          http::ParseCompletionRequest(req.body(), limits_);
      if (!parsed.ok()) return res.SetError(parsed.status());
      Serve(req, http::ApiKind::kCompletion, parsed->model, parsed->stream, parsed->include_usage,
            parsed->prompt.size(), parsed->sampling.max_tokens, res);
    });
    server_->AddHealthRoute();
    if (absl::Status s = server_->Start(); !s.ok()) throw std::runtime_error(s.ToString());
    // Serving starts on a background thread (slowly under TSan): wait for it, so that the
    // tests' timings measure requests, not the server's start.
    httplib::Client probe("127.0.0.1", server_->port());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (true) {
      httplib::Result health = probe.Get("/health");
      if (health && health->status == 200) break;
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("FakeLlmServer did not become healthy");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  ~FakeLlmServer() {
    server_->Stop();  // cancels live streams, so producers stop
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::thread& t : producers_) t.join();
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", server_->port()); }
  int arrivals() const { return arrivals_.load(); }
  int max_streams_at_once() const { return max_streams_.load(); }
  std::vector<std::string> request_ids() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return request_ids_;
  }

 private:
  void Serve(const http::HttpRequest& req, http::ApiKind kind, const std::string& model,
             bool stream, bool include_usage, size_t prompt_bytes, int max_tokens,
             http::HttpResponse& res) {
    const int arrival = ++arrivals_;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      request_ids_.push_back(req.request_id());
    }
    if (model != kFakeModel) return res.SetError(absl::NotFoundError("unknown model"));
    if (!stream || !include_usage) {
      return res.SetError(absl::InvalidArgumentError("the load generator must stream with usage"));
    }
    const FakeBehavior behavior =
        options_.behavior ? options_.behavior(arrival) : FakeBehavior::kStream;
    if (behavior == FakeBehavior::kHttp429) {
      return res.SetError(absl::ResourceExhaustedError("queue full"));
    }
    if (behavior == FakeBehavior::kHttp500) {
      return res.SetError(absl::InternalError("engine exploded"));
    }
    std::shared_ptr<http::SseStream> sse = res.StartSse();
    const http::Usage usage{static_cast<int64_t>(prompt_bytes), max_tokens};
    http::ResponseInfo info = http::NewResponseInfo(kind, model);
    std::lock_guard<std::mutex> lock(mutex_);
    producers_.emplace_back([this, sse, kind, info, behavior, max_tokens, usage] {
      const int streams = ++streams_;
      for (int seen = max_streams_.load(); streams > seen;) {
        if (max_streams_.compare_exchange_weak(seen, streams)) break;
      }
      // A stream stops counting before its last event is sent: once the client has it, it may
      // send its next request, and that one must not overlap this one in the count.
      bool counted = true;
      auto uncount = [&] {
        if (counted) --streams_;
        counted = false;
      };
      Produce(*sse, kind, info, behavior, max_tokens, usage, uncount);
      uncount();
    });
  }

  void Produce(http::SseStream& sse, http::ApiKind kind, const http::ResponseInfo& info,
               FakeBehavior behavior, int max_tokens, const http::Usage& usage,
               const std::function<void()>& before_last_event) {
    if (behavior == FakeBehavior::kStall) {
      sse.WaitCancelled(std::chrono::seconds(20));  // only keep-alives until the client leaves
      return;
    }
    http::StreamEncoder encoder(kind, info, /*include_usage=*/true);
    if (sse.WaitCancelled(options_.first_token_delay)) return;
    for (int i = 0; i < max_tokens; ++i) {
      if (i > 0 && sse.WaitCancelled(options_.token_delay)) return;
      if (behavior == FakeBehavior::kFailMidStream && i == 2) {
        before_last_event();
        sse.Fail(absl::UnavailableError("decode daemon lost"));
        return;
      }
      if (!sse.Send(encoder.Delta(absl::StrCat(" w", i)))) return;
    }
    before_last_event();
    for (std::string& payload : encoder.Finish(http::FinishReason::kLength, usage)) {
      sse.Send(std::move(payload));
    }
    sse.Finish();
  }

  const FakeLlmOptions options_;
  http::RequestLimits limits_;
  std::unique_ptr<http::HttpServer> server_;
  std::atomic<int> arrivals_{0};
  std::atomic<int> streams_{0};
  std::atomic<int> max_streams_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> request_ids_;
  std::vector<std::thread> producers_;
};

// Streams one chat content chunk, then drops the connection (no terminating chunk).
class DroppingServer {
 public:
  DroppingServer() {
    server_.Post("/v1/chat/completions", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("X-Request-Id", "dropped");
      res.set_chunked_content_provider("text/event-stream", [](size_t, httplib::DataSink& sink) {
        const std::string event = http::SseEvent(
            R"({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]})");
        sink.write(event.data(), event.size());
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return false;  // abort: httplib closes the socket mid-body
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("DroppingServer: cannot bind");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() only works on a running server, so wait until listening has begun.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~DroppingServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace scd::loadgen::testing

#endif  // SCD_TESTS_LOADGEN_FAKE_LLM_SERVER_H_
