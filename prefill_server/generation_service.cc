// See generation_service.h.
#include "prefill_server/generation_service.h"

#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/base/request_id.h"
#include "common/base/status_macros.h"
#include "common/http/openai_error.h"
#include "common/http/request_fields.h"
#include "common/rpc/status_translation.h"

namespace scd {
namespace {

// Writes events to the call's stream; a fan-out's sinks share one writer (`mu`: its writes
// must not overlap) and stamp their choice and model on every event.
class WriterSink final : public GenerationSink {
 public:
  WriterSink(grpc::ServerContext* context, grpc::ServerWriter<scd::v1::GenerateEvent>* writer,
             bool ids, std::mutex* mu = nullptr, int choice = 0, std::string model = "")
      : context_(context),
        writer_(writer),
        ids_(ids),
        mu_(mu),
        choice_(choice),
        model_(std::move(model)) {}
  bool OnDelta(const GenerationDelta& d) override {
    scd::v1::GenerateEvent e;
    e.mutable_delta()->set_text(d.text);
    if (ids_) {
      for (int32_t id : d.token_ids) e.mutable_delta()->add_token_ids(id);
    }
    return !context_->IsCancelled() && Write(e);
  }
  bool Cancelled() override { return context_->IsCancelled(); }
  bool Write(scd::v1::GenerateEvent& e) {
    e.set_choice(choice_);
    e.set_model(model_);
    if (mu_ == nullptr) return writer_->Write(e);
    std::lock_guard<std::mutex> lock(*mu_);
    return writer_->Write(e);
  }

 private:
  grpc::ServerContext* context_;
  grpc::ServerWriter<scd::v1::GenerateEvent>* writer_;
  bool ids_;
  std::mutex* mu_;
  int choice_;
  std::string model_;
};

// The done event of a request that ended well.
scd::v1::GenerateEvent DoneEvent(const GenerationOutcome& out, const std::string& request_id) {
  scd::v1::GenerateEvent e;
  auto* done = e.mutable_done();
  done->set_finish_reason(out.finish_reason);
  done->mutable_usage()->set_prompt_tokens(out.prompt_tokens);
  done->mutable_usage()->set_completion_tokens(out.completion_tokens);
  done->mutable_usage()->set_total_tokens(out.prompt_tokens + out.completion_tokens);
  *done->mutable_timings() = out.timings;
  done->set_request_id(request_id);
  done->set_decode_instance(out.decode_instance);
  return e;
}

scd::v1::GenerateEvent ErrorEvent(const absl::Status& st) {
  scd::v1::GenerateEvent e;
  e.mutable_error()->set_code(static_cast<int>(st.code()));
  e.mutable_error()->set_message(std::string(st.message()));
  return e;
}

// A call refused before any work; one over a limit or shed by admission gets its retry delay
// as a trailer, in seconds like HTTP's Retry-After.
grpc::Status Refuse(grpc::ServerContext* context, const absl::Status& st) {
  if (const int retry_after = RetryAfterSeconds(st); retry_after > 0) {
    context->AddTrailingMetadata("retry-after", absl::StrCat(retry_after));
  }
  return rpc::ToGrpcStatus(st);
}

}  // namespace

absl::StatusOr<ApiKeyLease> GenerationService::Authorize(grpc::ServerContext* context,
                                                         const scd::v1::GenerateRequest& r) const {
  if (keys_->empty()) return ApiKeyLease();
  std::string presented;
  if (r.has_api_key()) {
    presented = r.api_key();
  } else {
    auto it = context->client_metadata().find("authorization");
    if (it != context->client_metadata().end()) {
      presented = ApiKeyRing::BearerKey(std::string(it->second.data(), it->second.size()));
    }
  }
  if (presented.empty())
    return absl::UnauthenticatedError("an API key is required (authorization: Bearer <key>)");
  return keys_->Admit(presented);
}

// The request's fields through request_fields.h's checks, as the HTTP API checks them.
absl::StatusOr<GenerationRequest> GenerationService::Translate(
    const scd::v1::GenerateRequest& r) const {
  GenerationRequest g;
  if (r.model().empty()) return http::FieldError("model", "a model name is required");
  SCD_RETURN_IF_ERROR(http::CheckModelName(r.model(), limits_));
  g.model = r.model();
  const bool has_prompt = !r.prompt().empty();
  if (has_prompt == (r.messages_size() > 0)) {
    return absl::InvalidArgumentError("exactly one of prompt and messages must be set");
  }
  size_t bytes = r.prompt().size();
  if (has_prompt) {
    g.prompt = r.prompt();
  } else {
    SCD_RETURN_IF_ERROR(http::CheckMessageCount(static_cast<size_t>(r.messages_size()), limits_));
    g.chat = true;
    for (int i = 0; i < r.messages_size(); ++i) {
      std::string role = r.messages(i).role();
      SCD_RETURN_IF_ERROR(http::CheckRole(absl::StrCat("messages[", i, "].role"), &role));
      bytes += r.messages(i).content().size();
      g.messages.push_back({role, r.messages(i).content()});
    }
  }
  if (bytes > limits_.max_prompt_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt exceeds ", limits_.max_prompt_bytes, " bytes"));
  }
  // proto3: an unset max_tokens reads 0, "none given".
  const std::optional<int64_t> max_tokens =
      r.max_tokens() != 0 ? std::optional<int64_t>(r.max_tokens()) : std::nullopt;
  SCD_RETURN_IF_ERROR(http::ResolveMaxTokens("max_tokens", max_tokens, limits_, &g.sampling));
  const auto& s = r.sampling();
  if (s.has_temperature()) {
    SCD_RETURN_IF_ERROR(http::CheckTemperature(s.temperature()));
    g.sampling.temperature = s.temperature();
  }
  if (s.has_top_p()) {
    SCD_RETURN_IF_ERROR(http::CheckTopP(s.top_p()));
    g.sampling.top_p = s.top_p();
  }
  if (s.has_top_k()) SCD_RETURN_IF_ERROR(http::CheckTopK(s.top_k(), &g.sampling.top_k));
  if (s.has_seed()) g.sampling.seed = static_cast<int64_t>(s.seed());
  g.sampling.stop.assign(r.stop().begin(), r.stop().end());
  SCD_RETURN_IF_ERROR(http::CheckStop(g.sampling.stop, /*as_list=*/true, limits_));
  SCD_ASSIGN_OR_RETURN(
      g.mode, ModeRequestOf(
                  r.has_mode() ? std::optional<std::string>(r.mode()) : std::nullopt,
                  r.has_rung() ? std::optional<int>(r.rung()) : std::nullopt,
                  r.has_quality_floor() ? std::optional<double>(r.quality_floor()) : std::nullopt));
  return g;
}

grpc::Status GenerationService::Generate(grpc::ServerContext* context,
                                         const scd::v1::GenerateRequest* request,
                                         grpc::ServerWriter<scd::v1::GenerateEvent>* writer) {
  if (auth_ != nullptr) {
    if (grpc::Status admitted = auth_->Check(*context, "", refusals_); !admitted.ok()) {
      return admitted;
    }
  }
  const std::string request_id = NewRequestId();
  context->AddInitialMetadata("x-request-id", request_id);
  if (!accepting_.load())
    return rpc::ToGrpcStatus(absl::UnavailableError("the server is shutting down"));
  // Held until this call returns, which is before the client sees its status.
  absl::StatusOr<ApiKeyLease> lease = Authorize(context, *request);
  if (!lease.ok()) return Refuse(context, lease.status());
  absl::StatusOr<GenerationRequest> g = Translate(*request);
  if (!g.ok()) return rpc::ToGrpcStatus(g.status());
  g->request_id = request_id;
  g->arrived = absl::Now();
  if (request->fanout_size() > 0) return GenerateFanout(context, *request, *g, writer);
  absl::StatusOr<PreparedRequest> prepared = pipeline_->Prepare(std::move(*g));
  if (!prepared.ok()) return Refuse(context, prepared.status());
  WriterSink sink(context, writer, request->return_token_ids());
  bool any_output = false;
  struct Tracking final : GenerationSink {
    GenerationSink& inner;
    bool& any;
    Tracking(GenerationSink& i, bool& a) : inner(i), any(a) {}
    bool OnDelta(const GenerationDelta& d) override {
      any = true;
      return inner.OnDelta(d);
    }
    bool Cancelled() override { return inner.Cancelled(); }
  } tracking(sink, any_output);
  absl::StatusOr<GenerationOutcome> out = pipeline_->Run(*prepared, tracking);
  if (!out.ok()) {
    if (!any_output) return rpc::ToGrpcStatus(out.status());
    scd::v1::GenerateEvent e = ErrorEvent(out.status());
    writer->Write(e);
    return grpc::Status::OK;
  }
  scd::v1::GenerateEvent e = DoneEvent(*out, request_id);
  writer->Write(e);
  return grpc::Status::OK;
}

grpc::Status GenerationService::GenerateFanout(grpc::ServerContext* context,
                                               const scd::v1::GenerateRequest& request,
                                               const GenerationRequest& g,
                                               grpc::ServerWriter<scd::v1::GenerateEvent>* writer) {
  const std::vector<std::string> models(request.fanout().begin(), request.fanout().end());
  absl::StatusOr<std::vector<PreparedRequest>> prepared =
      pipeline_->PrepareFanout(g, models, "fanout");
  if (!prepared.ok()) return Refuse(context, prepared.status());
  std::mutex mu;
  std::vector<std::unique_ptr<WriterSink>> sinks;
  std::vector<GenerationSink*> to;
  for (size_t i = 0; i < models.size(); ++i) {
    sinks.push_back(std::make_unique<WriterSink>(context, writer, request.return_token_ids(), &mu,
                                                 static_cast<int>(i), models[i]));
    to.push_back(sinks.back().get());
  }
  std::vector<absl::StatusOr<GenerationOutcome>> outs = pipeline_->RunFanout(*prepared, to);
  for (size_t i = 0; i < models.size(); ++i) {
    scd::v1::GenerateEvent e =
        outs[i].ok() ? DoneEvent(*outs[i], g.request_id) : ErrorEvent(outs[i].status());
    sinks[i]->Write(e);
  }
  return grpc::Status::OK;
}

}  // namespace scd
