// See generation_service.h.
#include "prefill_server/generation_service.h"

#include <openssl/crypto.h>

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/status_translation.h"

namespace scd {
namespace {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string NewRequestId() {
  static const char kAlphabet[] = "0123456789abcdef";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = "req-";
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[rng() % 16]);
  return id;
}

class WriterSink final : public GenerationSink {
 public:
  WriterSink(grpc::ServerContext* context, grpc::ServerWriter<scd::v1::GenerateEvent>* writer,
             bool ids)
      : context_(context), writer_(writer), ids_(ids) {}
  bool OnDelta(const GenerationDelta& d) override {
    scd::v1::GenerateEvent e;
    e.mutable_delta()->set_text(d.text);
    if (ids_) {
      for (int32_t id : d.token_ids) e.mutable_delta()->add_token_ids(id);
    }
    return !context_->IsCancelled() && writer_->Write(e);
  }
  bool Cancelled() override { return context_->IsCancelled(); }

 private:
  grpc::ServerContext* context_;
  grpc::ServerWriter<scd::v1::GenerateEvent>* writer_;
  bool ids_;
};

}  // namespace

absl::Status GenerationService::Authorize(grpc::ServerContext* context,
                                          const scd::v1::GenerateRequest& r) const {
  if (api_key_.empty()) return absl::OkStatus();
  std::string presented;
  if (r.has_api_key()) {
    presented = r.api_key();
  } else {
    auto it = context->client_metadata().find("authorization");
    if (it != context->client_metadata().end()) {
      std::string value(it->second.data(), it->second.size());
      if (absl::StartsWithIgnoreCase(value, "Bearer ")) presented = value.substr(7);
    }
  }
  if (presented.empty()) return absl::UnauthenticatedError("an API key is required (authorization: Bearer <key>)");
  if (!ConstantTimeEquals(presented, api_key_)) return absl::UnauthenticatedError("the API key is not valid");
  return absl::OkStatus();
}

absl::StatusOr<GenerationRequest> GenerationService::Translate(const scd::v1::GenerateRequest& r) const {
  GenerationRequest g;
  if (r.model().empty()) return absl::InvalidArgumentError("model is required");
  if (r.model().size() > limits_.max_model_name_bytes) return absl::InvalidArgumentError("model name is too long");
  g.model = r.model();
  const bool has_prompt = !r.prompt().empty();
  if (has_prompt == (r.messages_size() > 0)) {
    return absl::InvalidArgumentError("exactly one of prompt and messages must be set");
  }
  size_t bytes = r.prompt().size();
  if (has_prompt) {
    g.prompt = r.prompt();
  } else {
    if (static_cast<size_t>(r.messages_size()) > limits_.max_messages) {
      return absl::InvalidArgumentError(absl::StrCat("at most ", limits_.max_messages, " messages"));
    }
    g.chat = true;
    for (int i = 0; i < r.messages_size(); ++i) {
      const auto& m = r.messages(i);
      std::string role = m.role() == "developer" ? "system" : m.role();
      if (!chat::IsKnownRole(role)) {
        return absl::InvalidArgumentError(absl::StrCat("messages[", i, "].role '", m.role(),
                                                       "' is not system, user or assistant"));
      }
      bytes += m.content().size();
      g.messages.push_back({role, m.content()});
    }
  }
  if (bytes > limits_.max_prompt_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt exceeds ", limits_.max_prompt_bytes, " bytes"));
  }
  if (r.max_tokens() < 0 || r.max_tokens() > limits_.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens must be in [0, ", limits_.max_tokens, "]"));
  }
  g.sampling.max_tokens = r.max_tokens();
  const auto& s = r.sampling();
  g.sampling.temperature = s.has_temperature() ? s.temperature() : 1.0f;
  if (!(g.sampling.temperature >= 0 && g.sampling.temperature <= 2)) {
    return absl::InvalidArgumentError("sampling.temperature must be in [0, 2]");
  }
  g.sampling.top_p = s.has_top_p() ? s.top_p() : 1.0f;
  if (!(g.sampling.top_p > 0 && g.sampling.top_p <= 1)) return absl::InvalidArgumentError("sampling.top_p must be in (0, 1]");
  g.sampling.top_k = s.has_top_k() ? s.top_k() : 0;
  if (g.sampling.top_k < 0) return absl::InvalidArgumentError("sampling.top_k must be >= 0");
  if (s.has_seed()) g.sampling.seed = static_cast<int64_t>(s.seed());
  if (static_cast<size_t>(r.stop_size()) > limits_.max_stop_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", limits_.max_stop_sequences, " stop strings"));
  }
  for (const std::string& stop : r.stop()) {
    if (stop.empty() || stop.size() > limits_.max_stop_bytes) {
      return absl::InvalidArgumentError("stop strings must be non-empty and short");
    }
    g.sampling.stop.push_back(stop);
  }
  return g;
}

grpc::Status GenerationService::Generate(grpc::ServerContext* context,
                                         const scd::v1::GenerateRequest* request,
                                         grpc::ServerWriter<scd::v1::GenerateEvent>* writer) {
  const std::string request_id = NewRequestId();
  context->AddInitialMetadata("x-request-id", request_id);
  if (!accepting_.load()) return rpc::ToGrpcStatus(absl::UnavailableError("the server is shutting down"));
  if (absl::Status st = Authorize(context, *request); !st.ok()) return rpc::ToGrpcStatus(st);
  absl::StatusOr<GenerationRequest> g = Translate(*request);
  if (!g.ok()) return rpc::ToGrpcStatus(g.status());
  g->request_id = request_id;
  g->arrived = absl::Now();
  absl::StatusOr<PreparedRequest> prepared = pipeline_->Prepare(std::move(*g));
  if (!prepared.ok()) return rpc::ToGrpcStatus(prepared.status());
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
    scd::v1::GenerateEvent e;
    e.mutable_error()->set_code(static_cast<int>(out.status().code()));
    e.mutable_error()->set_message(std::string(out.status().message()));
    writer->Write(e);
    return grpc::Status::OK;
  }
  scd::v1::GenerateEvent e;
  auto* done = e.mutable_done();
  done->set_finish_reason(out->finish_reason);
  done->mutable_usage()->set_prompt_tokens(out->prompt_tokens);
  done->mutable_usage()->set_completion_tokens(out->completion_tokens);
  done->mutable_usage()->set_total_tokens(out->prompt_tokens + out->completion_tokens);
  *done->mutable_timings() = out->timings;
  done->set_request_id(request_id);
  done->set_decode_instance(out->decode_instance);
  writer->Write(e);
  return grpc::Status::OK;
}

}  // namespace scd
