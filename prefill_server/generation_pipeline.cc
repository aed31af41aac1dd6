// See generation_pipeline.h.
#include "prefill_server/generation_pipeline.h"

#include <grpcpp/client_context.h>

#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/elapsed.h"
#include "common/base/status_macros.h"
#include "common/daemon/event_log.h"
#include "common/rpc/status_translation.h"
#include "common/scd/payload_prefix.h"
#include "prefill_server/stop_strings.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;

// Errors worth another replica: the daemon (or the path to it) failed, not the request.
bool Retryable(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kNotFound:  // payload never arrived
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:  // that replica's queue is full
      return true;
    default:
      return false;
  }
}

// The seed every attempt of the request uses: the client's, or one drawn here, so that a
// sampled request migrated to another decode daemon continues the same random stream.
uint64_t SeedFor(const PreparedRequest& r) {
  if (r.request.sampling.seed) return static_cast<uint64_t>(*r.request.sampling.seed);
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng() >> 1;
}

// Watches the client while an RPC blocks in Read: cancels the call when the client goes away.
class CancelWatcher {
 public:
  CancelWatcher(GenerationSink& sink, grpc::ClientContext& ctx)
      : thread_([this, &sink, &ctx] {
          while (!finished_.load()) {
            if (sink.Cancelled()) {
              ctx.TryCancel();
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  CancelWatcher(const CancelWatcher&) = delete;
  CancelWatcher& operator=(const CancelWatcher&) = delete;
  ~CancelWatcher() {
    finished_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace

struct GenerationPipeline::Metrics {
  metrics::CounterFamily* requests = nullptr;         // {model, mode}
  metrics::CounterFamily* errors = nullptr;           // {model, code}
  metrics::CounterFamily* retries = nullptr;          // {model}
  metrics::CounterFamily* migrations = nullptr;       // {specialist, outcome}
  metrics::CounterFamily* fallbacks = nullptr;        // {specialist, reason}
  metrics::CounterFamily* patch_layers = nullptr;     // {model, layer}
  metrics::CounterFamily* cache_hits = nullptr;       // {model}
  metrics::CounterFamily* cache_misses = nullptr;     // {model}
  metrics::CounterFamily* tokens = nullptr;           // {model}
  metrics::HistogramFamily* ttft = nullptr;           // {model, mode}
  metrics::HistogramFamily* itl = nullptr;            // {model}
  metrics::HistogramFamily* e2e = nullptr;            // {model, mode}
  metrics::HistogramFamily* prefill = nullptr;        // {model, mode}
  metrics::HistogramFamily* encode = nullptr;         // {model, mode}
  metrics::HistogramFamily* transfer = nullptr;       // {model, mode}
  metrics::HistogramFamily* payload_bytes = nullptr;  // {model, mode}
  metrics::Gauge* in_flight = nullptr;
};

// The tokens mode: auto remembers of recent contexts (4 bytes a token: about 4 million).
constexpr size_t kSeenContextBytes = size_t{16} << 20;

GenerationPipeline::GenerationPipeline(
    GenerationPipelineOptions options, Backend* producer, const Tokenizer* tokenizer,
    const std::map<std::string, std::unique_ptr<Specialist>>* specialists,
    rpc::DecodeRegistry* registry, PrefixCache* cache, std::unique_ptr<PayloadSender> sender,
    metrics::Registry* m)
    : options_(std::move(options)),
      producer_(producer),
      tokenizer_(tokenizer),
      specialists_(specialists),
      registry_(registry),
      cache_(cache),
      sender_(std::move(sender)),
      metrics_(std::make_unique<Metrics>()),
      mode_metrics_(m),
      admission_(options_.max_queue_wait, options_.producer_max_queue, registry, m) {
  std::random_device rd;
  next_transfer_id_.store((static_cast<uint64_t>(rd()) << 32 | rd()) | 1);
  seen_ = std::make_unique<PrefixCache>(kSeenContextBytes, options_.payload_block_tokens);
  if (m == nullptr) return;
  const auto secs = metrics::ExponentialBuckets(0.0005, 2, 18);
  Metrics& x = *metrics_;
  x.requests = m->AddCounterFamily("scd_requests_total",
                                   "Generation requests started, by specialist and codec mode.",
                                   {"model", "mode"})
                   .value();
  x.errors = m->AddCounterFamily("scd_request_errors_total",
                                 "Generation requests that ended with an error, by status code.",
                                 {"model", "code"})
                 .value();
  x.retries =
      m->AddCounterFamily(
           "scd_decode_retries_total",
           "Requests retried on another decode daemon after a failure before the first token.",
           {"model"})
          .value();
  x.migrations =
      m->AddCounterFamily("scd_migrations_total",
                          "Requests resent mid-stream, with the tokens streamed so far, to another "
                          "replica after their decode daemon failed; outcome: completed, failed "
                          "(failed later), refused (past limits.migration_limit).",
                          {"specialist", "outcome"})
          .value();
  x.fallbacks =
      m->AddCounterFamily("scd_fallbacks_total",
                          "Requests retried as oracle (token ids only) after their payload path "
                          "failed, by reason: data_plane, data_loss, payload_missing, rebuild.",
                          {"specialist", "reason"})
          .value();
  x.patch_layers =
      m->AddCounterFamily("scd_patch_layer_uses_total", "PATCH layers sent in payloads, by layer.",
                          {"model", "layer"})
          .value();
  x.cache_hits = m->AddCounterFamily("scd_prefix_cache_hits_total",
                                     "Requests whose prompt reused cached prefix codes.", {"model"})
                     .value();
  x.cache_misses =
      m->AddCounterFamily("scd_prefix_cache_misses_total",
                          "Requests that ran the base-model prefill (no usable cached prefix).",
                          {"model"})
          .value();
  x.tokens =
      m->AddCounterFamily("scd_generated_tokens_total", "Tokens generated.", {"model"}).value();
  x.ttft = m->AddHistogramFamily(
                "scd_time_to_first_token_seconds",
                "Request arrival to the first generated token reaching the prefill daemon.",
                {"model", "mode"}, secs)
               .value();
  x.itl = m->AddHistogramFamily("scd_inter_token_latency_seconds", "Time between streamed tokens.",
                                {"model"}, secs)
              .value();
  x.e2e = m->AddHistogramFamily("scd_request_duration_seconds",
                                "Request arrival to its last event.", {"model", "mode"}, secs)
              .value();
  x.prefill = m->AddHistogramFamily("scd_producer_prefill_seconds",
                                    "Base-model prefill of the prompt prefix (cache misses).",
                                    {"model", "mode"}, secs)
                  .value();
  x.encode = m->AddHistogramFamily("scd_encode_seconds", "Encoding producer states into a payload.",
                                   {"model", "mode"}, secs)
                 .value();
  x.transfer = m->AddHistogramFamily("scd_transfer_seconds",
                                     "Payload on the data plane, send to verified receipt.",
                                     {"model", "mode"}, secs)
                   .value();
  x.payload_bytes =
      m->AddHistogramFamily("scd_payload_bytes", "Payload size on the data plane.",
                            {"model", "mode"}, metrics::ExponentialBuckets(1024, 4, 12))
          .value();
  x.in_flight = m->AddGauge("scd_requests_in_flight", "Generation requests running now.").value();
}

GenerationPipeline::~GenerationPipeline() {
  if (sender_ != nullptr) sender_->CloseAll();
}

void GenerationPipeline::CountError(const std::string& model, const absl::Status& st) {
  if (metrics_->errors != nullptr) {
    metrics_->errors->WithLabels({model, absl::StatusCodeToString(st.code())}).value()->Increment();
  }
}

absl::StatusOr<PreparedRequest> GenerationPipeline::Prepare(GenerationRequest request) {
  auto it = specialists_->find(request.model);
  if (it == specialists_->end()) {
    std::string known;
    for (const auto& [name, s] : *specialists_)
      absl::StrAppend(&known, known.empty() ? "" : ", ", name);
    return absl::NotFoundError(
        absl::StrCat("The model '", request.model, "' does not exist; this server has: ", known));
  }
  PreparedRequest p;
  p.specialist = it->second.get();
  const int context = producer_->model().config.max_position_embeddings;
  if (request.chat) {
    absl::StatusOr<std::string> text = p.specialist->chat_template->Render(request.messages);
    if (!text.ok()) return text.status();
    p.tokens = tokenizer_->Encode(*text, !p.specialist->chat_template->renders_bos());
    for (const std::string& s : p.specialist->chat_template->stop_strings()) p.stop.push_back(s);
  } else {
    p.tokens = tokenizer_->Encode(request.prompt, true);
  }
  if (p.tokens.empty()) return absl::InvalidArgumentError("the prompt tokenizes to nothing");
  // The API edge resolved the budget within limits.max_tokens; here, where the prompt's length
  // is first known, it is checked against the context, for both APIs (request_fields.h).
  absl::StatusOr<int> budget =
      http::FitMaxTokensToContext(request.sampling, static_cast<int>(p.tokens.size()), context);
  if (!budget.ok()) return budget.status();
  p.max_tokens = *budget;
  for (const std::string& s : request.sampling.stop) p.stop.push_back(s);
  if (registry_->LiveInstanceCount(request.model) == 0) {
    return absl::UnavailableError(
        absl::StrCat("no decode daemon is registered for model '", request.model, "'"));
  }
  p.deadline = request.arrived + options_.request_timeout;
  SCD_ASSIGN_OR_RETURN(p.admission, admission_.Admit(request.model, request.request_id));
  ModeContext mc;
  mc.tokens = &p.tokens;
  mc.cache = options_.prefix_cache ? cache_ : nullptr;
  mc.seen = mc.cache != nullptr ? seen_.get() : nullptr;
  mc.payload_block_tokens = options_.payload_block_tokens;
  mc.max_consumer_suffix = options_.max_consumer_suffix;
  mc.producer_wait_seconds = absl::ToDoubleSeconds(p.admission->producer_wait());
  mc.decode_wait_seconds = absl::ToDoubleSeconds(p.admission->decode_wait());
  if (absl::StatusOr<rpc::DecodeInstanceStatus> next = registry_->PeekPick(request.model);
      next.ok()) {
    mc.decode_instance = next->info.instance_id;
    mc.decode_rates = DecodeSideRatesOf(next->rates.rebuild_seconds_per_token,
                                        next->rates.prefill_seconds_per_token);
  }
  SCD_ASSIGN_OR_RETURN(p.mode, SelectMode(*p.specialist, request.mode, mc));
  mode_metrics_.CountChoice(request.model, p.mode);
  p.request = std::move(request);
  return p;
}

absl::StatusOr<GenerationPipeline::Encoded> GenerationPipeline::BuildPayload(
    const PreparedRequest& r, scd::v1::Timings* timings) {
  const Specialist& s = *r.specialist;
  const std::string& model = s.config.name;
  const CodecMode m = r.mode.mode;
  const std::string mode(CodecModeName(m));
  Encoded out;
  const int t = static_cast<int>(r.tokens.size());
  if (t == 1) {  // nothing to encode: the consumer prefills the single token
    out.suffix = r.tokens;
    return out;
  }
  const bool cacheable = options_.prefix_cache && cache_ != nullptr && m != CodecMode::kOracle;
  if (cacheable) {
    PrefixHit hit = cache_->Lookup(s.PairTag(m), r.mode.CacheKind(), r.tokens);
    if (hit && t - hit.length <= options_.max_consumer_suffix) {
      if (hit.partial()) {
        absl::StatusOr<Payload> full = ParsePayload(hit.entry->payload);
        if (!full.ok()) return full.status();
        absl::StatusOr<Payload> cut = PayloadPrefix(*full, hit.length);
        if (!cut.ok()) return cut.status();
        out.bytes = SerializePayload(*cut);
      } else {
        out.bytes = hit.entry->payload;
      }
      out.suffix.assign(r.tokens.begin() + hit.length, r.tokens.end());
      out.cache_hit = true;
      if (metrics_->cache_hits != nullptr)
        metrics_->cache_hits->WithLabels({model}).value()->Increment();
      timings->set_prefix_cache_hit(true);
      return out;
    }
    if (metrics_->cache_misses != nullptr)
      metrics_->cache_misses->WithLabels({model}).value()->Increment();
  }
  size_t covered = r.tokens.size() - 1;
  if (options_.payload_block_tokens > 0 && m != CodecMode::kOracle) {
    const size_t block = static_cast<size_t>(options_.payload_block_tokens);
    if (covered >= block) covered = covered / block * block;
  }
  const absl::Span<const int32_t> prefix(r.tokens.data(), covered);
  PrefillResult states;
  const auto t0 = Clock::now();
  if (m != CodecMode::kOracle) {
    // The base model runs one prefill at a time; up to producer_max_queue more may wait for
    // it, and beyond that the request is refused (429 with Retry-After) rather than queued
    // without bound.
    std::unique_lock<std::mutex> lock(producer_mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
      if (producer_waiting_.fetch_add(1) >= options_.producer_max_queue) {
        --producer_waiting_;
        return absl::ResourceExhaustedError(absl::StrCat(
            "the prefill queue is full (", options_.producer_max_queue, " requests waiting)"));
      }
      lock.lock();
      --producer_waiting_;
    }
    timings->set_queue_ms(MsSince(t0));
    if (absl::Now() > r.deadline)
      return absl::DeadlineExceededError("request deadline passed while queued for prefill");
    const auto tp = Clock::now();
    absl::StatusOr<std::unique_ptr<Sequence>> seq =
        producer_->NewSequence(static_cast<int>(prefix.size()));
    if (!seq.ok()) return seq.status();
    if (absl::Status st = producer_->Prefill(**seq, prefix, ProducerPrefillOptions(m), &states);
        !st.ok()) {
      return st;
    }
    timings->set_prefill_ms(MsSince(tp));
  }
  const auto te = Clock::now();
  absl::StatusOr<Payload> payload = s.codec->Encode(m, prefix, states, 0, r.mode.rung);
  if (!payload.ok()) return payload.status();
  out.bytes = SerializePayload(*payload);
  timings->set_encode_ms(MsSince(te));
  out.suffix.assign(r.tokens.begin() + static_cast<std::ptrdiff_t>(covered), r.tokens.end());
  if (metrics_->prefill != nullptr && m != CodecMode::kOracle) {
    metrics_->prefill->WithLabels({model, mode}).value()->Observe(timings->prefill_ms() / 1e3);
    metrics_->encode->WithLabels({model, mode}).value()->Observe(timings->encode_ms() / 1e3);
  }
  if (cacheable)
    cache_->Insert(s.PairTag(m), r.mode.CacheKind(),
                   std::vector<int32_t>(prefix.begin(), prefix.end()), out.bytes);
  return out;
}

std::shared_ptr<scd::v1::Decode::Stub> GenerationPipeline::StubFor(const std::string& address) {
  std::lock_guard<std::mutex> lock(stubs_mu_);
  auto it = stubs_.find(address);
  if (it != stubs_.end()) return it->second;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      rpc::MakeChannel(address, options_.decode_channel);
  if (!channel.ok()) return nullptr;
  auto stub = std::shared_ptr<scd::v1::Decode::Stub>(scd::v1::Decode::NewStub(*channel));
  stubs_[address] = stub;
  return stub;
}

// What a request has streamed so far, across attempts: a migrated request continues the same
// text decoder, stop-string matcher and token list on its next decode daemon.
struct GenerationPipeline::StreamState {
  StreamState(const Tokenizer& tokenizer, const PreparedRequest& r, uint64_t seed)
      : text(tokenizer), stops(r.stop), seed(seed) {}
  StreamDecoder text;
  StopStringMatcher stops;
  uint64_t seed;                   // sent with every attempt of a sampled request
  std::vector<int32_t> generated;  // every token received, emitted or held back
  std::vector<int32_t> pending_ids;
  Clock::time_point last_emit;
  bool emitted = false;
  bool first_token = false;  // the time to first token is taken: ttft_ms
  double ttft_ms = 0;
};

// One decode stream's reading: its events become deltas for the sink, after stop strings, and
// its final event fills the outcome.
struct GenerationPipeline::DecodeStream {
  DecodeStream(const GenerationPipeline& p, const PreparedRequest& r, const rpc::DecodeRoute& route,
               grpc::ClientContext& ctx, GenerationSink& sink, GenerationOutcome* outcome,
               StreamState& state)
      : metrics(*p.metrics_),
        r(r),
        model(r.specialist->config.name),
        mode(CodecModeName(r.mode.mode)),
        route(route),
        ctx(ctx),
        sink(sink),
        outcome(outcome),
        st(state),
        resumed(static_cast<int>(state.generated.size())) {}

  // Reads the stream to its end: the status of the attempt.
  absl::Status Read(grpc::ClientReader<scd::v1::DecodeEvent>& reader);
  void OnToken(const scd::v1::DecodeEvent::Token& token);
  void OnDone(const scd::v1::DecodeEvent::Done& d);
  // After the last event read: how the attempt ended, and the held-back text delivered.
  absl::Status End(grpc::ClientReader<scd::v1::DecodeEvent>& reader);
  void Emit(std::string piece);
  // The time to first token: when the first generated token (or, when the first one ends the
  // request, the final event) reaches this daemon. Not when its text is streamed: a token that
  // ends inside a character streams nothing yet, and which tokens a model emits first says
  // nothing of how its context travelled.
  void FirstToken();

  const Metrics& metrics;
  const PreparedRequest& r;
  const std::string& model;
  const std::string mode;
  const rpc::DecodeRoute& route;
  grpc::ClientContext& ctx;
  GenerationSink& sink;
  GenerationOutcome* const outcome;
  StreamState& st;
  const int resumed;  // tokens streamed by earlier attempts
  bool client_gone = false, stopped = false, done = false;
};

absl::Status GenerationPipeline::DecodeStream::Read(
    grpc::ClientReader<scd::v1::DecodeEvent>& reader) {
  scd::v1::DecodeEvent ev;
  while (!client_gone && !stopped && reader.Read(&ev)) {
    if (ev.has_token()) {
      OnToken(ev.token());
    } else if (ev.has_done()) {
      OnDone(ev.done());
    } else if (ev.has_error()) {
      grpc::Status unused = reader.Finish();
      (void)unused;
      return absl::Status(
          static_cast<absl::StatusCode>(ev.error().code()),
          absl::StrCat("decode daemon ", route.instance_id, ": ", ev.error().message()));
    }
  }
  return End(reader);
}

void GenerationPipeline::DecodeStream::OnToken(const scd::v1::DecodeEvent::Token& token) {
  if (token.has_first_token_timings()) {
    const auto& t = token.first_token_timings();
    outcome->timings.set_rebuild_ms(t.rebuild_ms());
    outcome->timings.set_suffix_prefill_ms(t.suffix_prefill_ms());
    outcome->timings.set_sekv_build_ms(t.sekv_build_ms());
  }
  if (token.id() < 0) return;
  FirstToken();
  st.generated.push_back(token.id());
  st.pending_ids.push_back(token.id());
  Emit(st.stops.Push(st.text.Push(token.id()), &stopped));
  if (stopped) ctx.TryCancel();
}

void GenerationPipeline::DecodeStream::OnDone(const scd::v1::DecodeEvent::Done& d) {
  FirstToken();
  outcome->finish_reason = d.finish_reason() == "length" ? "length" : "stop";
  outcome->prompt_tokens = static_cast<int>(r.tokens.size());
  outcome->completion_tokens = resumed + d.completion_tokens();
  outcome->timings.set_rebuild_ms(d.timings().rebuild_ms());
  outcome->timings.set_suffix_prefill_ms(d.timings().suffix_prefill_ms());
  outcome->timings.set_sekv_build_ms(d.timings().sekv_build_ms());
  outcome->timings.set_decode_ms(d.timings().decode_ms());
  done = true;
}

absl::Status GenerationPipeline::DecodeStream::End(
    grpc::ClientReader<scd::v1::DecodeEvent>& reader) {
  if (client_gone) {
    reader.Finish();
    return absl::CancelledError("the client went away");
  }
  if (stopped) {
    reader.Finish();
    outcome->finish_reason = "stop";
    outcome->prompt_tokens = static_cast<int>(r.tokens.size());
    outcome->completion_tokens = static_cast<int>(st.generated.size());
    return absl::OkStatus();
  }
  grpc::Status gs = reader.Finish();
  if (!done) {
    if (sink.Cancelled()) return absl::CancelledError("the client went away");
    absl::Status status =
        gs.ok() ? absl::UnavailableError("the decode stream ended without a final event")
                : rpc::FromGrpcStatus(gs);
    return absl::Status(status.code(),
                        absl::StrCat("decode daemon ", route.instance_id, " at ", route.rpc_address,
                                     ": ", std::string(status.message())));
  }
  Emit(st.stops.Push(st.text.Flush(), &stopped));
  Emit(st.stops.Flush());
  return absl::OkStatus();
}

void GenerationPipeline::DecodeStream::FirstToken() {
  if (st.first_token) return;
  st.first_token = true;
  const double ttft = absl::ToDoubleMilliseconds(absl::Now() - r.request.arrived);
  st.ttft_ms = ttft;
  outcome->timings.set_ttft_ms(ttft);
  if (metrics.ttft != nullptr) metrics.ttft->WithLabels({model, mode}).value()->Observe(ttft / 1e3);
}

void GenerationPipeline::DecodeStream::Emit(std::string piece) {
  if (piece.empty()) return;  // ids wait for the text they produce
  GenerationDelta d;
  d.text = std::move(piece);
  d.token_ids.swap(st.pending_ids);
  const auto now = Clock::now();
  if (st.emitted && metrics.itl != nullptr) {
    metrics.itl->WithLabels({model}).value()->Observe(
        std::chrono::duration<double>(now - st.last_emit).count());
  }
  st.last_emit = now;
  st.emitted = true;
  if (!sink.OnDelta(d)) {
    client_gone = true;
    ctx.TryCancel();
  }
}

absl::Status GenerationPipeline::FillDecodeRequest(const PreparedRequest& r, const Encoded& payload,
                                                   const StreamState& state,
                                                   const rpc::DecodeRoute& route,
                                                   scd::v1::DecodeRequest* req,
                                                   GenerationOutcome* outcome) {
  const std::string& model = r.specialist->config.name;
  req->set_request_id(r.request.request_id);
  req->set_model(model);
  if (!payload.bytes.empty()) {
    if (payload.bytes.size() <= options_.inline_max_bytes) {
      req->set_inline_payload(payload.bytes.data(), payload.bytes.size());
    } else {
      const uint64_t id = next_transfer_id_.fetch_add(2);
      // Fresh per transfer: the decode daemon hands the payload only to the call naming it.
      const transport::TransferToken token = transport::NewTransferToken();
      const auto t0 = Clock::now();
      absl::Status st =
          sender_->Send(route.data_plane_address, id, token, payload.bytes, r.deadline);
      if (!st.ok()) return st;
      outcome->timings.set_transfer_ms(MsSince(t0));
      if (metrics_->transfer != nullptr) {
        const std::string mode(CodecModeName(r.mode.mode));
        metrics_->transfer->WithLabels({model, mode})
            .value()
            ->Observe(outcome->timings.transfer_ms() / 1e3);
      }
      req->set_transfer_id(id);
      req->set_transfer_token(token.data(), token.size());
    }
  }
  outcome->timings.set_payload_bytes(payload.bytes.size());
  for (int32_t id : payload.suffix) req->add_suffix_token_ids(id);
  // A migrated request: the tokens streamed so far follow the prompt's suffix.
  for (int32_t id : state.generated) req->add_suffix_token_ids(id);
  req->set_resumed_tokens(static_cast<int>(state.generated.size()));
  req->set_max_tokens(r.max_tokens - static_cast<int>(state.generated.size()));
  const http::SamplingParams& sp = r.request.sampling;
  req->mutable_sampling()->set_temperature(sp.temperature);
  req->mutable_sampling()->set_top_p(sp.top_p);
  req->mutable_sampling()->set_top_k(sp.top_k);
  req->mutable_sampling()->set_seed(state.seed);
  req->set_deadline_ms(std::max<int64_t>(1, absl::ToInt64Milliseconds(r.deadline - absl::Now())));
  return absl::OkStatus();
}

absl::Status GenerationPipeline::Attempt(const PreparedRequest& r, const Encoded& payload,
                                         const rpc::DecodeLease& lease, GenerationSink& sink,
                                         StreamState& state, GenerationOutcome* outcome,
                                         std::string* payload_failure) {
  const rpc::DecodeRoute& route = lease.route();
  scd::v1::DecodeRequest req;
  if (absl::Status st = FillDecodeRequest(r, payload, state, route, &req, outcome); !st.ok()) {
    *payload_failure = st.code() == absl::StatusCode::kDataLoss ? "data_loss" : "data_plane";
    return st;
  }
  std::shared_ptr<scd::v1::Decode::Stub> stub = StubFor(route.rpc_address);
  if (stub == nullptr)
    return absl::InternalError(absl::StrCat("cannot make a channel to ", route.rpc_address));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(r.deadline));
  std::unique_ptr<grpc::ClientReader<scd::v1::DecodeEvent>> reader = stub->Generate(&ctx, req);
  CancelWatcher watcher(sink, ctx);
  const size_t before = state.generated.size();
  DecodeStream stream(*this, r, route, ctx, sink, outcome, state);
  absl::Status st = stream.Read(*reader);
  if (!st.ok() && state.generated.size() == before && !payload.bytes.empty()) {
    // Failures of the payload itself, before any token: the decode daemon could not use it.
    switch (st.code()) {
      case absl::StatusCode::kDataLoss:
        *payload_failure = "data_loss";
        break;
      case absl::StatusCode::kNotFound:
        *payload_failure = "payload_missing";
        break;
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kInternal:
        *payload_failure = "rebuild";
        break;
      default:
        break;
    }
  }
  return st;
}

absl::StatusOr<GenerationOutcome> GenerationPipeline::Fail(const PreparedRequest& r,
                                                           absl::Status st) {
  const std::string& model = r.specialist->config.name;
  CountError(model, st);
  daemon::LogWarning("request_failed", {{"request_id", r.request.request_id},
                                        {"model", model},
                                        {"code", absl::StatusCodeToString(st.code())},
                                        {"message", std::string(st.message())}});
  return st;
}

GenerationOutcome GenerationPipeline::Succeed(const PreparedRequest& r, const Encoded& payload,
                                              GenerationOutcome outcome) {
  const std::string& model = r.specialist->config.name;
  const RequestMode used =
      payload.fallback ? RequestMode{CodecMode::kOracle, 0, "oracle", -1} : r.mode;
  const std::string mode(CodecModeName(used.mode));
  outcome.timings.set_mode(mode);
  outcome.timings.set_rung(used.rung);
  outcome.timings.set_rung_name(used.name);
  outcome.timings.set_predicted_ttft_ms(used.predicted_seconds > 0 ? used.predicted_seconds * 1e3
                                                                   : 0);
  mode_metrics_.ObserveTtft(model, used, outcome.timings.ttft_ms() / 1e3);
  const double e2e = absl::ToDoubleSeconds(absl::Now() - r.request.arrived);
  if (metrics_->e2e != nullptr) {
    metrics_->e2e->WithLabels({model, mode}).value()->Observe(e2e);
    metrics_->tokens->WithLabels({model}).value()->Increment(outcome.completion_tokens);
  }
  daemon::LogInfo(
      "request_done",
      {{"request_id", r.request.request_id},
       {"model", model},
       {"mode", mode},
       {"rung", used.name},
       {"decode_instance", outcome.decode_instance},
       {"prompt_tokens", outcome.prompt_tokens},
       {"completion_tokens", outcome.completion_tokens},
       {"cache_hit", payload.cache_hit},
       {"ttft_ms", outcome.timings.ttft_ms()},
       {"predicted_ttft_ms",
        r.admission != nullptr ? absl::ToDoubleMilliseconds(r.admission->predicted_ttft()) : 0.0},
       {"e2e_ms", e2e * 1e3}});
  return outcome;
}

void GenerationPipeline::ObserveDecode(const PreparedRequest& r, const GenerationOutcome& outcome) {
  const scd::v1::Timings& t = outcome.timings;
  if (t.ttft_ms() <= 0) return;  // no first-token time
  // The slot is held from the first-token work on the decode daemon to the stream's end.
  const absl::Duration first_token_work =
      absl::Milliseconds(t.rebuild_ms() + t.suffix_prefill_ms() + t.sekv_build_ms());
  const absl::Time first_token = r.request.arrived + absl::Milliseconds(t.ttft_ms());
  admission_.ObserveDecode(r.specialist->config.name, first_token_work,
                           first_token_work + (absl::Now() - first_token));
}

void GenerationPipeline::CountMigrations(const std::string& model, int migrations,
                                         const std::string& outcome) {
  if (migrations > 0 && metrics_->migrations != nullptr) {
    metrics_->migrations->WithLabels({model, outcome}).value()->Increment(migrations);
  }
}

absl::StatusOr<GenerationOutcome> GenerationPipeline::Run(const PreparedRequest& r,
                                                          GenerationSink& sink) {
  return RunWith(r, sink, [&](scd::v1::Timings* t) { return BuildPayload(r, t); });
}

absl::StatusOr<GenerationOutcome> GenerationPipeline::RunWith(const PreparedRequest& r,
                                                              GenerationSink& sink,
                                                              const BuildFn& build) {
  const Specialist& s = *r.specialist;
  const std::string& model = s.config.name;
  const std::string mode(CodecModeName(r.mode.mode));
  ++in_flight_;
  if (metrics_->in_flight != nullptr) metrics_->in_flight->Set(in_flight_.load());
  struct Leave {
    GenerationPipeline* p;
    ~Leave() {
      --p->in_flight_;
      if (p->metrics_->in_flight != nullptr) p->metrics_->in_flight->Set(p->in_flight_.load());
    }
  } leave{this};
  if (metrics_->requests != nullptr)
    metrics_->requests->WithLabels({model, mode}).value()->Increment();

  scd::v1::Timings timings;
  absl::StatusOr<Encoded> payload = build(&timings);
  if (r.admission != nullptr) r.admission->LeaveProducer();
  if (!payload.ok()) {
    if (payload.status().code() == absl::StatusCode::kResourceExhausted) {
      admission_.CountShed(model, "prefill_queue");
    }
    return Fail(r, payload.status());
  }
  // The producer held for the prefill alone (zero for a cache hit or an oracle payload).
  admission_.ObserveProducer(absl::Milliseconds(timings.prefill_ms()));
  if (metrics_->payload_bytes != nullptr && !payload->bytes.empty()) {
    metrics_->payload_bytes->WithLabels({model, mode})
        .value()
        ->Observe(static_cast<double>(payload->bytes.size()));
    if (!payload->cache_hit && r.mode.mode == CodecMode::kScd) {
      const size_t patched = r.mode.rung < static_cast<int>(s.ladder.size())
                                 ? static_cast<size_t>(s.ladder[r.mode.rung].patch_layers)
                                 : s.patch_layers.size();
      for (size_t i = 0; i < std::min(patched, s.patch_layers.size()); ++i) {
        const int layer = s.patch_layers[i];
        metrics_->patch_layers->WithLabels({model, std::to_string(layer)}).value()->Increment();
      }
    }
  }
  return Dispatch(r, *payload, timings, sink);
}

// A request's attempts, from the first to its end (Dispatch).
struct GenerationPipeline::Attempts {
  Attempts(const Tokenizer& tokenizer, const PreparedRequest& r, const Encoded& payload)
      : state(tokenizer, r, SeedFor(r)), current(&payload) {}
  StreamState state;
  Encoded oracle;  // the fallback: token ids only, the decode daemon prefills the prompt
  const Encoded* current;
  // Set when the payload path failed before the first token: an oracle retry is possible, on
  // that daemon when no other replica is available (it needs no data plane).
  std::string fallback_reason;
  rpc::DecodeLease fallback_daemon;
  int retries = 0, migrations = 0;
  absl::Status last;
};

bool GenerationPipeline::FallBack(const PreparedRequest& r, Attempts& a) {
  if (a.fallback_reason.empty() || a.current == &a.oracle) return false;
  const std::string& model = r.specialist->config.name;
  a.oracle.suffix = r.tokens;
  a.oracle.fallback = true;
  a.current = &a.oracle;
  if (metrics_->fallbacks != nullptr)
    metrics_->fallbacks->WithLabels({model, a.fallback_reason}).value()->Increment();
  daemon::LogWarning("decode_fallback_oracle", {{"request_id", r.request.request_id},
                                                {"reason", a.fallback_reason},
                                                {"message", std::string(a.last.message())}});
  return true;
}

absl::Status GenerationPipeline::NextAttempt(const PreparedRequest& r, Attempts& a,
                                             const std::string& instance,
                                             const std::string& payload_failure,
                                             rpc::DecodeLease lease) {
  const Specialist& s = *r.specialist;
  const absl::Status& st = a.last;
  const bool mid_stream = !a.state.generated.empty();
  if (!payload_failure.empty() && !mid_stream && s.config.fallback == "oracle") {
    a.fallback_reason = payload_failure;
    a.fallback_daemon = std::move(lease);
  }
  if (absl::Now() > r.deadline) return st;
  if (!Retryable(st)) return FallBack(r, a) ? absl::OkStatus() : st;
  if (st.code() != absl::StatusCode::kResourceExhausted) registry_->MarkFailed(instance);
  if (mid_stream) {
    if (a.migrations >= options_.migration_limit) {
      CountMigrations(s.config.name, 1, "refused");
      return absl::Status(st.code(),
                          absl::StrCat(std::string(st.message()),
                                       "; not migrated again: limits.migration_limit is ",
                                       options_.migration_limit));
    }
    ++a.migrations;
    daemon::LogWarning("decode_migrate", {{"request_id", r.request.request_id},
                                          {"failed_instance", instance},
                                          {"tokens_streamed", a.state.generated.size()},
                                          {"message", std::string(st.message())}});
    return absl::OkStatus();
  }
  if (a.retries >= s.config.max_retries) return FallBack(r, a) ? absl::OkStatus() : st;
  ++a.retries;
  if (metrics_->retries != nullptr)
    metrics_->retries->WithLabels({s.config.name}).value()->Increment();
  daemon::LogWarning("decode_retry", {{"request_id", r.request.request_id},
                                      {"failed_instance", instance},
                                      {"message", std::string(st.message())}});
  return absl::OkStatus();
}

// The request on decode daemons until it ends: retried on another replica when a daemon fails
// before the first token (max_retries), migrated with the tokens streamed so far when one fails
// mid-stream (migration_limit), and when a failed payload path would otherwise end it, retried
// once as oracle (fallback).
absl::StatusOr<GenerationOutcome> GenerationPipeline::Dispatch(const PreparedRequest& r,
                                                               const Encoded& payload,
                                                               const scd::v1::Timings& timings,
                                                               GenerationSink& sink) {
  const std::string& model = r.specialist->config.name;
  Attempts a(*tokenizer_, r, payload);
  auto fail = [&](absl::Status st) {
    CountMigrations(model, a.migrations, "failed");
    return Fail(r, std::move(st));
  };
  while (true) {
    if (sink.Cancelled()) return fail(absl::CancelledError("the client went away"));
    absl::StatusOr<rpc::DecodeLease> lease = registry_->Pick(model);
    if (!lease.ok() && lease.status().code() == absl::StatusCode::kUnavailable &&
        a.fallback_daemon.held() && (a.current == &a.oracle || FallBack(r, a))) {
      lease = std::move(a.fallback_daemon);  // the only daemon left, as oracle
    }
    if (r.admission != nullptr) r.admission->LeaveDispatch();
    if (!lease.ok()) {
      if (!a.last.ok() && lease.status().code() == absl::StatusCode::kUnavailable) {
        return fail(absl::UnavailableError(
            absl::StrCat(std::string(a.last.message()), "; no other decode daemon is available")));
      }
      return fail(lease.status());
    }
    GenerationOutcome outcome;
    outcome.timings = timings;
    if (a.state.first_token) outcome.timings.set_ttft_ms(a.state.ttft_ms);  // a migrated request
    std::string payload_failure;
    absl::Status st = Attempt(r, *a.current, *lease, sink, a.state, &outcome, &payload_failure);
    const std::string instance = lease->route().instance_id;
    if (st.ok()) {
      outcome.decode_instance = instance;
      CountMigrations(model, a.migrations, "completed");
      if (a.migrations == 0) {
        ObserveDecode(r, outcome);
        if (!a.current->fallback) {
          const int suffix = static_cast<int>(a.current->suffix.size());
          ObserveStages(*r.specialist, r.mode, outcome.timings,
                        static_cast<int>(r.tokens.size()) - suffix, suffix, a.current->cache_hit,
                        outcome.timings.transfer_ms() > 0, instance);
        }
      }
      return Succeed(r, *a.current, std::move(outcome));
    }
    if (st.code() == absl::StatusCode::kCancelled && sink.Cancelled()) return fail(st);
    a.last = st;
    if (absl::Status next = NextAttempt(r, a, instance, payload_failure, std::move(*lease));
        !next.ok()) {
      return fail(next);
    }
  }
}
}  // namespace scd
