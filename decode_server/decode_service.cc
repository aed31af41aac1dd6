// See decode_service.h.
#include "decode_server/decode_service.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/daemon/event_log.h"
#include "common/http/request_fields.h"
#include "common/rpc/status_translation.h"
#include "common/scd/wire_format.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;

// The engine's events for one call, handed from the engine thread to the RPC thread. Shared
// so that it outlives a call that returns early (the engine still delivers the final event).
struct EventQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<DecodeEvent> events;

  void Push(const DecodeEvent& e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      events.push_back(e);
    }
    cv.notify_one();
  }
  // The next event, or nullopt after `wait` passes without one.
  std::optional<DecodeEvent> Pop(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, wait, [&] { return !events.empty(); })) return std::nullopt;
    DecodeEvent e = std::move(events.front());
    events.pop_front();
    return e;
  }
};

void FillTimings(const DecodeTimings& t, double decode_ms, scd::v1::Timings* out) {
  out->set_queue_ms(t.queue_ms);
  out->set_rebuild_ms(t.rebuild_ms);
  out->set_suffix_prefill_ms(t.suffix_prefill_ms);
  out->set_sekv_build_ms(t.sekv_build_ms);
  out->set_decode_ms(decode_ms);
}

}  // namespace

DecodeService::DecodeService(DecodeEngine* engine, PayloadMailbox* mailbox,
                             const Tokenizer* tokenizer, DecodeServiceOptions options,
                             metrics::Registry* metrics, DecodeServiceGuard guard)
    : engine_(engine),
      mailbox_(mailbox),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      guard_(std::move(guard)) {
  if (metrics == nullptr) return;
  auto seconds = metrics::ExponentialBuckets(0.0005, 2, 16);
  requests_ = metrics
                  ->AddCounterFamily("scd_decode_requests_total",
                                     "Decode RPCs by outcome (ok, cancelled, or the error code).",
                                     {"outcome"})
                  .value();
  rebuild_seconds_ = metrics
                         ->AddHistogram("scd_decode_rebuild_seconds",
                                        "Rebuilding the consumer KV cache from a payload.", seconds)
                         .value();
  suffix_prefill_seconds_ =
      metrics
          ->AddHistogram("scd_decode_suffix_prefill_seconds",
                         "The decode daemon's own prefill of the suffix tokens.", seconds)
          .value();
  sekv_build_seconds_ =
      metrics
          ->AddHistogram("scd_decode_sekv_build_seconds",
                         "A SEKV request's hierarchy before its first token: segmentation, span "
                         "summaries and CPU-tier bases, GPU mirror (SEKV path only).",
                         seconds)
          .value();
  queue_seconds_ = metrics
                       ->AddHistogram("scd_decode_queue_seconds",
                                      "Waiting for a continuous-batching slot.", seconds)
                       .value();
  itl_seconds_ = metrics
                     ->AddHistogram("scd_decode_inter_token_seconds",
                                    "Time between consecutive generated tokens.", seconds)
                     .value();
  payload_bytes_ = metrics
                       ->AddHistogram("scd_decode_payload_bytes", "SCD payload size received.",
                                      metrics::ExponentialBuckets(1024, 4, 12))
                       .value();
}

void DecodeService::Count(const std::string& outcome) {
  if (requests_ != nullptr) requests_->WithLabels({outcome}).value()->Increment();
}

absl::Status DecodeService::Validate(const scd::v1::DecodeRequest& r) const {
  if (r.model() != options_.model_name) {
    return absl::NotFoundError(absl::StrCat("this decode daemon serves '", options_.model_name,
                                            "', not '", r.model(), "'"));
  }
  SCD_RETURN_IF_ERROR(http::CheckMaxTokens("max_tokens", r.max_tokens(), options_.max_tokens));
  if (r.suffix_token_ids_size() == 0) {
    return absl::InvalidArgumentError("suffix_token_ids must hold at least one token");
  }
  const int vocab = engine_->model().config.vocab_size;
  for (int id : r.suffix_token_ids()) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("suffix token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  for (int id : r.stop_token_ids()) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop token id ", id, " is outside the vocabulary"));
    }
  }
  if (r.transfer_id() != 0 && r.transfer_token().size() != transport::kTransferTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transfer_token must be ", transport::kTransferTokenBytes, " bytes with a transfer_id"));
  }
  if (r.deadline_ms() < 0) return absl::InvalidArgumentError("deadline_ms must be >= 0");
  if (r.resumed_tokens() < 0 || r.resumed_tokens() >= r.suffix_token_ids_size()) {
    return absl::InvalidArgumentError(
        "resumed_tokens must be >= 0 and leave at least one suffix token that is the prompt's");
  }
  const auto& s = r.sampling();
  if (s.has_temperature() && !(s.temperature() >= 0 && s.temperature() <= 100)) {
    return absl::InvalidArgumentError("sampling.temperature must be in [0, 100]");
  }
  if (s.has_top_p() && !(s.top_p() > 0 && s.top_p() <= 1)) {
    return absl::InvalidArgumentError("sampling.top_p must be in (0, 1]");
  }
  if (s.has_top_k() && s.top_k() < 0)
    return absl::InvalidArgumentError("sampling.top_k must be >= 0");
  return absl::OkStatus();
}

// One call's stream to the caller: the engine's events written as they come.
struct DecodeService::Stream {
  Stream(DecodeEngine* engine, const Tokenizer& tokenizer, grpc::ServerContext* context,
         grpc::ServerWriter<scd::v1::DecodeEvent>* writer, uint64_t job_id)
      : engine(engine), context(context), writer(writer), job_id(job_id), text(tokenizer) {}

  // Asks the engine once to end the job; its final event still comes.
  void Cancel() {
    if (!cancelled) engine->Cancel(job_id);
    cancelled = true;
  }
  bool CallerGone() const { return cancelled || context->IsCancelled(); }

  DecodeEngine* const engine;
  grpc::ServerContext* const context;
  grpc::ServerWriter<scd::v1::DecodeEvent>* const writer;
  const uint64_t job_id;
  StreamDecoder text;
  bool cancelled = false;
  int written = 0;
  Clock::time_point first_token, last_token;
  // The job's stages, for the reported rates: the payload's mode and tokens (none: a request
  // without a payload), and the suffix's tokens.
  std::optional<PayloadHeaderSummary> payload;
  int suffix_tokens = 0;
};

grpc::Status DecodeService::Refuse(const scd::v1::DecodeRequest& request, const absl::Status& st) {
  Count(absl::StatusCodeToString(st.code()));
  daemon::LogWarning("decode_refused", {{"request_id", request.request_id()},
                                        {"code", absl::StatusCodeToString(st.code())},
                                        {"message", std::string(st.message())}});
  return rpc::ToGrpcStatus(st);
}

absl::StatusOr<DecodeJob> DecodeService::MakeJob(const scd::v1::DecodeRequest& request) {
  const absl::Time received = absl::Now();
  const absl::Duration budget = request.deadline_ms() > 0
                                    ? absl::Milliseconds(request.deadline_ms())
                                    : options_.default_deadline;
  DecodeJob job;
  job.request_id = next_job_id_.fetch_add(1);
  job.deadline = received + budget;
  if (request.transfer_id() != 0) {
    transport::TransferToken token{};  // Validate checked its size
    std::copy(request.transfer_token().begin(), request.transfer_token().end(), token.begin());
    auto bytes = mailbox_->Take(request.transfer_id(), token,
                                std::min(job.deadline, received + options_.payload_wait));
    if (!bytes.ok()) return bytes.status();
    job.payload = std::move(*bytes);
  } else {
    job.payload.assign(request.inline_payload().begin(), request.inline_payload().end());
    // Data-plane payloads were verified by the transport's frame checksum; an inline one only
    // by TCP's 16-bit sum, so damage on the way is told apart here (DATA_LOSS: the prefill
    // daemon may try another replica) rather than as a malformed request.
    SCD_RETURN_IF_ERROR(VerifyPayloadChecksums(job.payload));
  }
  if (payload_bytes_ != nullptr) payload_bytes_->Observe(static_cast<double>(job.payload.size()));
  job.suffix.assign(request.suffix_token_ids().begin(), request.suffix_token_ids().end());
  job.max_tokens = request.max_tokens();
  job.resumed = request.resumed_tokens();
  const auto& s = request.sampling();
  job.sampling.temperature = s.has_temperature() ? s.temperature() : 1.0f;
  job.sampling.top_p = s.has_top_p() ? s.top_p() : 1.0f;
  job.sampling.top_k = s.has_top_k() ? s.top_k() : 0;
  job.sampling.seed = s.has_seed() ? s.seed() : job.request_id * 0x9e3779b97f4a7c15ULL;
  job.stop_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  if (!job.stop_ids.empty()) {  // EOS always stops
    for (int eos : engine_->model().config.eos_token_ids) job.stop_ids.push_back(eos);
  }
  return job;
}

void DecodeService::WriteToken(Stream& s, const DecodeEvent& e) {
  const auto now = Clock::now();
  if (s.written == 0) {
    s.first_token = now;
  } else if (itl_seconds_ != nullptr) {
    itl_seconds_->Observe(std::chrono::duration<double>(now - s.last_token).count());
  }
  s.last_token = now;
  scd::v1::DecodeEvent out;
  out.mutable_token()->set_id(e.token);
  out.mutable_token()->set_text_piece(s.text.Push(e.token));
  if (s.written == 0) FillTimings(e.timings, 0, out.mutable_token()->mutable_first_token_timings());
  if (s.CallerGone() || !s.writer->Write(out)) {
    s.Cancel();
    return;
  }
  ++s.written;
}

grpc::Status DecodeService::EndWithError(Stream& s, const scd::v1::DecodeRequest& request,
                                         const DecodeEvent& e) {
  const absl::Status& st = e.error;
  if (s.CallerGone()) {
    Count("cancelled");
    return grpc::Status(grpc::StatusCode::CANCELLED, "request cancelled by the caller");
  }
  if (s.written == 0) return Refuse(request, st);
  Count(absl::StatusCodeToString(st.code()));
  scd::v1::DecodeEvent out;
  out.mutable_error()->set_code(static_cast<int>(st.code()));
  out.mutable_error()->set_message(std::string(st.message()));
  s.writer->Write(out);
  return grpc::Status::OK;
}

grpc::Status DecodeService::EndDone(Stream& s, const DecodeEvent& e) {
  rates_.Observe(s.payload ? s.payload->mode : CodecMode::kOracle,
                 s.payload ? s.payload->num_tokens : 0, e.timings.rebuild_ms / 1e3, s.suffix_tokens,
                 e.timings.suffix_prefill_ms / 1e3);
  if (rebuild_seconds_ != nullptr) {
    rebuild_seconds_->Observe(e.timings.rebuild_ms / 1e3);
    suffix_prefill_seconds_->Observe(e.timings.suffix_prefill_ms / 1e3);
    if (e.timings.sekv_build_ms > 0) sekv_build_seconds_->Observe(e.timings.sekv_build_ms / 1e3);
    queue_seconds_->Observe(e.timings.queue_ms / 1e3);
  }
  scd::v1::DecodeEvent out;
  auto* done = out.mutable_done();
  const std::string tail = s.text.Flush();
  if (!tail.empty()) {  // a held-back partial character: deliver it with an empty token
    scd::v1::DecodeEvent piece;
    piece.mutable_token()->set_id(-1);
    piece.mutable_token()->set_text_piece(tail);
    s.writer->Write(piece);
  }
  done->set_finish_reason(e.finish_reason == "context" ? "length" : e.finish_reason);
  done->set_prompt_tokens(e.prompt_tokens);
  done->set_completion_tokens(e.completion_tokens);
  const double decode_ms =
      s.written > 1
          ? std::chrono::duration<double, std::milli>(s.last_token - s.first_token).count()
          : 0.0;
  FillTimings(e.timings, decode_ms, done->mutable_timings());
  Count("ok");
  s.writer->Write(out);
  return grpc::Status::OK;
}

grpc::Status DecodeService::Generate(grpc::ServerContext* context,
                                     const scd::v1::DecodeRequest* request,
                                     grpc::ServerWriter<scd::v1::DecodeEvent>* writer) {
  struct InFlight {
    std::atomic<int>& n;
    explicit InFlight(std::atomic<int>& c) : n(c) { ++n; }
    ~InFlight() { --n; }
  } in_flight(in_flight_);
  if (guard_.auth != nullptr) {
    // Before anything of the request is read (the refusal is logged and counted there).
    grpc::Status admitted = guard_.auth->Check(*context, guard_.cluster_token, guard_.refusals);
    if (!admitted.ok()) return admitted;
  }
  if (!accepting_.load())
    return Refuse(*request, absl::UnavailableError("decode daemon is draining"));
  if (absl::Status st = Validate(*request); !st.ok()) return Refuse(*request, st);
  absl::StatusOr<DecodeJob> job = MakeJob(*request);
  if (!job.ok()) return Refuse(*request, job.status());
  const uint64_t job_id = job->request_id;
  absl::StatusOr<PayloadHeaderSummary> payload = PeekPayloadHeader(job->payload);
  const int suffix_tokens = static_cast<int>(job->suffix.size());

  auto queue = std::make_shared<EventQueue>();
  if (absl::Status st =
          engine_->Submit(std::move(*job), [queue](const DecodeEvent& e) { queue->Push(e); });
      !st.ok()) {
    return Refuse(*request, st);
  }
  Stream s(engine_, *tokenizer_, context, writer, job_id);
  if (payload.ok()) s.payload = *payload;
  s.suffix_tokens = suffix_tokens;
  for (;;) {
    std::optional<DecodeEvent> e = queue->Pop(std::chrono::milliseconds(50));
    if (!e) {
      if (context->IsCancelled()) s.Cancel();
      continue;
    }
    if (e->kind == DecodeEvent::Kind::kToken) {
      WriteToken(s, *e);
      continue;
    }
    // The final event.
    if (e->kind == DecodeEvent::Kind::kError) return EndWithError(s, *request, *e);
    return EndDone(s, *e);
  }
}

}  // namespace scd
