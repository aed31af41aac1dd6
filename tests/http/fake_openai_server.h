// A fake OpenAI-compatible server for the HTTP tests: the real HttpServer and the real request
// parsing and response encoding, with a "model" that streams max_tokens tokens " w0", " w1",
// ... one every `token_delay`, on a producer thread per stream (as the prefill daemon relays
// tokens from a decode daemon). It counts handler calls and how each stream ended, so tests
// can check that no work is done for rejected requests and that a disconnect is noticed.
#ifndef SCD_TESTS_HTTP_FAKE_OPENAI_SERVER_H_
#define SCD_TESTS_HTTP_FAKE_OPENAI_SERVER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/http/http_server.h"
#include "common/http/openai_api.h"
#include "common/http/openai_error.h"
#include "common/http/openai_response.h"
#include "common/metrics/registry.h"

namespace scd::http::fake {

inline constexpr char kModel[] = "fake-model";

// The text of the fake model's first n tokens.
inline std::string FakeText(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) absl::StrAppend(&text, " w", i);
  return text;
}

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(HttpServerOptions options = {},
                            std::chrono::milliseconds token_delay = std::chrono::milliseconds(1))
      : token_delay_(token_delay) {
    options.metrics = &registry_;
    absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Create(std::move(options));
    if (!server.ok()) throw std::runtime_error(server.status().ToString());
    server_ = std::move(*server);
    server_->AddHealthRoute();
    server_->AddReadyRoute([this] {
      return ready_ ? absl::OkStatus() : absl::UnavailableError("no decode daemon registered");
    });
    server_->AddMetricsRoute(&registry_);
    server_->Get("/v1/models", [this](const HttpRequest&, HttpResponse& res) {
      ++handler_calls;
      res.SetJson(200, DumpJson(ModelListJson({ModelCard{kModel, 1700000000, "scd-serve"}})));
    });
    server_->GetPrefix("/v1/models/", [this](const HttpRequest& req, HttpResponse& res) {
      ++handler_calls;
      if (req.path() != std::string("/v1/models/") + kModel) {
        return res.SetError(WithErrorCode(absl::NotFoundError("no such model"), "model_not_found"));
      }
      res.SetJson(200, DumpJson(ModelJson(ModelCard{kModel, 1700000000, "scd-serve"})));
    });
    server_->Post("/v1/chat/completions", [this](const HttpRequest& req, HttpResponse& res) {
      ++handler_calls;
      absl::StatusOr<ChatCompletionRequest> parsed = ParseChatCompletionRequest(req.body(), limits);
      if (!parsed.ok()) return res.SetError(parsed.status());
      size_t prompt_bytes = 0;
      for (const auto& m : parsed->messages) prompt_bytes += m.content.size();
      Serve(ApiKind::kChatCompletion, parsed->model, prompt_bytes, parsed->sampling.max_tokens,
            parsed->stream, parsed->include_usage, res);
    });
    server_->Post("/v1/completions", [this](const HttpRequest& req, HttpResponse& res) {
      ++handler_calls;
      absl::StatusOr<CompletionRequest> parsed = ParseCompletionRequest(req.body(), limits);
      if (!parsed.ok()) return res.SetError(parsed.status());
      Serve(ApiKind::kCompletion, parsed->model, parsed->prompt.size(), parsed->sampling.max_tokens,
            parsed->stream, parsed->include_usage, res);
    });
    if (absl::Status s = server_->Start(); !s.ok()) throw std::runtime_error(s.ToString());
  }

  ~FakeOpenAiServer() {
    server_->Stop();  // cancels live streams, so producers stop sending
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::thread& t : producers_) t.join();
  }

  int port() const { return server_->port(); }
  HttpServer& server() { return *server_; }
  metrics::Registry& registry() { return registry_; }
  void set_ready(bool ready) { ready_ = ready; }

  RequestLimits limits;
  std::atomic<int> handler_calls{0};
  std::atomic<int> streams_completed{0};
  std::atomic<int> streams_cancelled{0};
  std::atomic<int> tokens_streamed{0};  // by the most recent stream
  // Streams fail with this status after `fail_after_tokens` tokens when set (>= 0).
  int fail_after_tokens = -1;

 private:
  void Serve(ApiKind kind, const std::string& model, size_t prompt_bytes, int max_tokens,
             bool stream, bool include_usage, HttpResponse& res) {
    if (model != kModel) {
      return res.SetError(
          WithErrorCode(absl::NotFoundError(absl::StrCat("The model '", model, "' does not exist")),
                        "model_not_found"));
    }
    const Usage usage{static_cast<int64_t>(prompt_bytes), max_tokens};
    ResponseInfo info = NewResponseInfo(kind, model);
    if (!stream) {
      const std::string text = FakeText(max_tokens);
      nlohmann::json body = kind == ApiKind::kCompletion
                                ? CompletionJson(info, text, FinishReason::kLength, usage)
                                : ChatCompletionJson(info, text, FinishReason::kLength, usage);
      return res.SetJson(200, DumpJson(body));
    }
    std::shared_ptr<SseStream> sse = res.StartSse();
    std::lock_guard<std::mutex> lock(mutex_);
    producers_.emplace_back([this, sse, kind, info, include_usage, max_tokens, usage] {
      StreamEncoder encoder(kind, info, include_usage);
      tokens_streamed = 0;
      for (int i = 0; i < max_tokens; ++i) {
        if (i == fail_after_tokens) {
          sse->Fail(absl::UnavailableError("decode daemon lost"));
          return;
        }
        if (!sse->Send(encoder.Delta(absl::StrCat(" w", i)))) {
          ++streams_cancelled;  // the client went away: stop "generating"
          return;
        }
        ++tokens_streamed;
        std::this_thread::sleep_for(token_delay_);
      }
      for (std::string& payload : encoder.Finish(FinishReason::kLength, usage)) {
        sse->Send(std::move(payload));
      }
      sse->Finish();
      ++streams_completed;
    });
  }

  const std::chrono::milliseconds token_delay_;
  std::atomic<bool> ready_{true};
  metrics::Registry registry_;
  std::unique_ptr<HttpServer> server_;
  std::mutex mutex_;
  std::vector<std::thread> producers_;
};

}  // namespace scd::http::fake

#endif  // SCD_TESTS_HTTP_FAKE_OPENAI_SERVER_H_
