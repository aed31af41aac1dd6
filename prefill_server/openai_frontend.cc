// See openai_frontend.h.
#include "prefill_server/openai_frontend.h"

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http/openai_error.h"
#include "common/http/openai_response.h"

namespace scd {
namespace {

http::FinishReason ToFinish(const std::string& reason) {
  return reason == "length" ? http::FinishReason::kLength : http::FinishReason::kStop;
}

// Collects the whole text for a non-streaming response.
class BufferSink final : public GenerationSink {
 public:
  bool OnDelta(const GenerationDelta& d) override {
    text.append(d.text);
    return true;
  }
  bool Cancelled() override { return false; }
  std::string text;
};

// Streams deltas as OpenAI chunks.
class SseSink final : public GenerationSink {
 public:
  SseSink(std::shared_ptr<http::SseStream> sse, http::StreamEncoder* encoder)
      : sse_(std::move(sse)), encoder_(encoder) {}
  bool OnDelta(const GenerationDelta& d) override { return sse_->Send(encoder_->Delta(d.text)); }
  bool Cancelled() override { return sse_->cancelled(); }

 private:
  std::shared_ptr<http::SseStream> sse_;
  http::StreamEncoder* encoder_;
};

// Answers a request refused before any work: its error, with the retry delay admission or the
// key's limit derived as Retry-After (in place of SetError's generic one).
void Refuse(http::HttpResponse& res, const absl::Status& st) {
  res.SetError(st);
  if (const int retry_after = RetryAfterSeconds(st); retry_after > 0) {
    res.SetHeader("Retry-After", absl::StrCat(retry_after));
  }
}

}  // namespace

OpenAiFrontend::OpenAiFrontend(http::HttpServer* server, GenerationPipeline* pipeline,
                               ApiKeyRing* keys, std::vector<std::string> model_names,
                               http::RequestLimits limits)
    : pipeline_(pipeline),
      keys_(keys),
      model_names_(std::move(model_names)),
      limits_(limits),
      created_(absl::ToUnixSeconds(absl::Now())) {
  server->Get("/v1/models", [this](const http::HttpRequest&, http::HttpResponse& res) {
    std::vector<http::ModelCard> cards;
    for (const std::string& name : model_names_) cards.push_back({name, created_, "scd-serve"});
    res.SetJson(200, http::DumpJson(http::ModelListJson(cards)));
  });
  server->GetPrefix("/v1/models/", [this](const http::HttpRequest& req, http::HttpResponse& res) {
    const std::string id = req.path().substr(std::string("/v1/models/").size());
    for (const std::string& name : model_names_) {
      if (name == id) return res.SetJson(200, http::DumpJson(http::ModelJson({name, created_})));
    }
    res.SetError(http::WithErrorCode(
        absl::NotFoundError(absl::StrCat("The model '", id, "' does not exist")),
        "model_not_found"));
  });
  server->Post("/v1/completions", [this](const http::HttpRequest& req, http::HttpResponse& res) {
    Handle(false, req, res);
  });
  server->Post("/v1/chat/completions", [this](const http::HttpRequest& req,
                                              http::HttpResponse& res) { Handle(true, req, res); });
}

OpenAiFrontend::~OpenAiFrontend() { WaitForWorkers(std::chrono::hours(1)); }

int OpenAiFrontend::WaitForWorkers(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait_for(lock, timeout, [&] { return workers_ == 0; });
  return workers_;
}

void OpenAiFrontend::Handle(bool chat, const http::HttpRequest& req, http::HttpResponse& res) {
  // The server let only valid keys through; here the key's limits, before any work.
  absl::StatusOr<ApiKeyLease> lease =
      keys_->Admit(ApiKeyRing::BearerKey(req.header("Authorization")));
  if (!lease.ok()) return Refuse(res, lease.status());
  if (absl::Status st = http::CheckJsonContentType(req.header("Content-Type")); !st.ok()) {
    return res.SetError(st);
  }
  GenerationRequest g;
  g.arrived = absl::Now();
  g.request_id = req.request_id();
  g.chat = chat;
  bool stream = false, include_usage = false;
  http::ScdExtension scd_ext;
  if (chat) {
    absl::StatusOr<http::ChatCompletionRequest> p =
        http::ParseChatCompletionRequest(req.body(), limits_);
    if (!p.ok()) return res.SetError(p.status());
    g.model = p->model;
    g.messages = std::move(p->messages);
    g.sampling = std::move(p->sampling);
    stream = p->stream;
    include_usage = p->include_usage;
    scd_ext = std::move(p->scd);
  } else {
    absl::StatusOr<http::CompletionRequest> p = http::ParseCompletionRequest(req.body(), limits_);
    if (!p.ok()) return res.SetError(p.status());
    g.model = p->model;
    g.prompt = std::move(p->prompt);
    g.sampling = std::move(p->sampling);
    stream = p->stream;
    include_usage = p->include_usage;
    scd_ext = std::move(p->scd);
  }
  absl::StatusOr<ModeRequest> ask =
      ModeRequestOf(scd_ext.mode, scd_ext.rung, scd_ext.quality_floor);
  if (!ask.ok()) return res.SetError(ask.status());
  g.mode = *ask;
  if (!scd_ext.fanout.empty()) {
    return HandleFanout(chat, std::move(g), scd_ext.fanout, stream, include_usage,
                        std::move(*lease), res);
  }
  absl::StatusOr<PreparedRequest> prepared = pipeline_->Prepare(std::move(g));
  if (!prepared.ok()) {
    absl::Status st = prepared.status();
    if (st.code() == absl::StatusCode::kNotFound) st = http::WithErrorCode(st, "model_not_found");
    return Refuse(res, st);  // shed by admission: with the delay it derived
  }
  const http::ApiKind kind = chat ? http::ApiKind::kChatCompletion : http::ApiKind::kCompletion;
  http::ResponseInfo info = http::NewResponseInfo(kind, prepared->request.model);
  if (!stream) {
    BufferSink sink;
    absl::StatusOr<GenerationOutcome> out = pipeline_->Run(*prepared, sink);
    if (!out.ok()) return res.SetError(out.status());
    const http::Usage usage{out->prompt_tokens, out->completion_tokens};
    nlohmann::json body =
        chat ? http::ChatCompletionJson(info, sink.text, ToFinish(out->finish_reason), usage)
             : http::CompletionJson(info, sink.text, ToFinish(out->finish_reason), usage);
    body["scd"] = ModeJson(out->timings);
    return res.SetJson(200, http::DumpJson(body));
  }
  std::shared_ptr<http::SseStream> sse = res.StartSse();
  Enter();
  std::thread([this, sse, kind, info = std::move(info), include_usage,
               prepared = std::move(*prepared), lease = std::move(*lease)]() mutable {
    http::StreamEncoder encoder(kind, info, include_usage);
    SseSink sink(sse, &encoder);
    absl::StatusOr<GenerationOutcome> out = pipeline_->Run(prepared, sink);
    lease.Release();  // before the last event: a client that read it finds the slot free
    if (out.ok()) {
      for (std::string& chunk :
           encoder.Finish(ToFinish(out->finish_reason),
                          {out->prompt_tokens, out->completion_tokens}, ModeJson(out->timings))) {
        sse->Send(std::move(chunk));
      }
      sse->Finish();
    } else {
      sse->Fail(out.status());
    }
    Leave();
  }).detach();
}

void OpenAiFrontend::Enter() {
  std::lock_guard<std::mutex> lock(mu_);
  ++workers_;
}

void OpenAiFrontend::Leave() {
  std::lock_guard<std::mutex> lock(mu_);
  --workers_;
  idle_.notify_all();
}

void OpenAiFrontend::HandleFanout(bool chat, GenerationRequest g,
                                  const std::vector<std::string>& models, bool stream,
                                  bool include_usage, ApiKeyLease lease, http::HttpResponse& res) {
  absl::StatusOr<std::vector<PreparedRequest>> prepared =
      pipeline_->PrepareFanout(g, models, "scd.fanout");
  if (!prepared.ok()) {
    absl::Status st = prepared.status();
    if (st.code() == absl::StatusCode::kNotFound) st = http::WithErrorCode(st, "model_not_found");
    return Refuse(res, st);
  }
  const http::ApiKind kind = chat ? http::ApiKind::kChatCompletion : http::ApiKind::kCompletion;
  http::ResponseInfo info = http::NewResponseInfo(kind, g.model);
  if (!stream) {
    absl::StatusOr<std::string> body = FanoutBody(chat, info, models, *prepared);
    if (!body.ok()) return res.SetError(body.status());
    return res.SetJson(200, *body);
  }
  std::shared_ptr<http::SseStream> sse = res.StartSse();
  Enter();
  std::thread([this, sse, kind, info = std::move(info), include_usage, models,
               prepared = std::move(*prepared), lease = std::move(lease)]() mutable {
    const size_t n = models.size();
    std::vector<http::StreamEncoder> encoders(n, http::StreamEncoder(kind, info, false));
    std::vector<std::unique_ptr<SseSink>> sinks;
    std::vector<GenerationSink*> to;
    for (size_t i = 0; i < n; ++i) {
      encoders[i].SetChoice(static_cast<int>(i), models[i]);
      sinks.push_back(std::make_unique<SseSink>(sse, &encoders[i]));
      to.push_back(sinks.back().get());
    }
    std::vector<absl::StatusOr<GenerationOutcome>> outs = pipeline_->RunFanout(prepared, to);
    lease.Release();
    absl::Status failed;
    http::Usage total{0, 0};
    for (size_t i = 0; i < n; ++i) {
      if (!outs[i].ok()) {
        if (failed.ok()) failed = outs[i].status();
        continue;
      }
      const GenerationOutcome& o = *outs[i];
      for (std::string& chunk :
           encoders[i].Finish(ToFinish(o.finish_reason), {}, ModeJson(o.timings))) {
        sse->Send(std::move(chunk));
      }
      total.prompt_tokens += o.prompt_tokens;
      total.completion_tokens += o.completion_tokens;
    }
    if (!failed.ok()) {
      sse->Fail(failed);
    } else {
      if (include_usage) sse->Send(encoders[0].UsageChunk(total));
      sse->Finish();
    }
    Leave();
  }).detach();
}

absl::StatusOr<std::string> OpenAiFrontend::FanoutBody(
    bool chat, const http::ResponseInfo& info, const std::vector<std::string>& models,
    const std::vector<PreparedRequest>& prepared) {
  const size_t n = models.size();
  std::vector<BufferSink> sinks(n);
  std::vector<GenerationSink*> to(n);
  for (size_t i = 0; i < n; ++i) to[i] = &sinks[i];
  std::vector<absl::StatusOr<GenerationOutcome>> outs = pipeline_->RunFanout(prepared, to);
  nlohmann::json choices = nlohmann::json::array();
  http::Usage total{0, 0};
  for (size_t i = 0; i < n; ++i) {
    if (!outs[i].ok()) return outs[i].status();
    const GenerationOutcome& o = *outs[i];
    const http::Usage usage{o.prompt_tokens, o.completion_tokens};
    nlohmann::json one =
        chat ? http::ChatCompletionJson(info, sinks[i].text, ToFinish(o.finish_reason), usage)
             : http::CompletionJson(info, sinks[i].text, ToFinish(o.finish_reason), usage);
    nlohmann::json choice = one["choices"][0];
    choice["index"] = i;
    choice["model"] = models[i];
    choice["scd"] = ModeJson(o.timings);
    choices.push_back(std::move(choice));
    total.prompt_tokens += o.prompt_tokens;
    total.completion_tokens += o.completion_tokens;
  }
  nlohmann::json body = chat ? http::ChatCompletionJson(info, "", http::FinishReason::kStop, total)
                             : http::CompletionJson(info, "", http::FinishReason::kStop, total);
  body["choices"] = std::move(choices);
  return http::DumpJson(body);
}

}  // namespace scd
