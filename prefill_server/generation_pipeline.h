// GenerationPipeline: one client request through the disaggregated path, shared by the HTTP
// (OpenAI) and gRPC (Generation) front ends:
//
//   Prepare  model → Specialist (NOT_FOUND), chat template, tokenize, context check
//            (INVALID_ARGUMENT), a live decode daemon for the model (UNAVAILABLE, fail fast),
//            admission: a request predicted not to see its first token well within
//            limits.max_queue_wait, or behind a full prefill queue, is refused
//            (RESOURCE_EXHAUSTED with a retry delay, admission.h)
//   Run      shared-prefix cache lookup ── hit: reuse the cached codes (cut to the shared
//            block prefix), the consumer prefills the rest itself
//                                      └─ miss: base-model prefill of prompt[0, T-1), encode
//                                         with the specialist's mode, cache
//            pick a decode daemon (least loaded) → payload over the data plane → Decode RPC
//            → tokens → detokenize, stop strings → the sink
//
// Failure semantics: a decode daemon that fails before the first token (unreachable, killed,
// queue full) is quarantined in the registry and the request is retried on another replica
// (up to the specialist's max_retries). A failed payload path (data plane unreachable,
// DATA_LOSS, payload missing, rebuild refused) that would otherwise end the request (no retry
// left, or not retryable) is retried once as oracle, token ids only, on a healthy replica, or
// on the same daemon when it is the only one (the specialist's fallback: oracle | fail). A daemon
// that fails mid-stream is quarantined and the request migrates to another replica with the prompt
// plus the tokens streamed so far, the same seed and the sampler advanced past them, so the
// client's stream continues with no token lost or repeated (up to migration_limit times; then an
// UNAVAILABLE error naming the daemon). Every wait has the request deadline. A sink that reports
// its client gone cancels the Decode RPC, which frees the decode slot.
//
// Thread-safe; each Run blocks its caller until the request ends.
#ifndef SCD_PREFILL_SERVER_GENERATION_PIPELINE_H_
#define SCD_PREFILL_SERVER_GENERATION_PIPELINE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/chat/chat_template.h"
#include "common/http/openai_api.h"
#include "common/metrics/registry.h"
#include "common/rpc/credentials.h"
#include "common/rpc/decode_registry.h"
#include "common/runtime/backend.h"
#include "common/serving/prefix_cache.h"
#include "common/tokenizer/tokenizer.h"
#include "prefill_server/admission.h"
#include "prefill_server/mode_selection.h"
#include "prefill_server/payload_sender.h"
#include "prefill_server/specialist.h"
#include "proto/scd.grpc.pb.h"

namespace scd {

struct GenerationRequest {
  std::string request_id;
  std::string model;
  bool chat = false;
  std::string prompt;                       // !chat
  std::vector<chat::ChatMessage> messages;  // chat
  // In range, max_tokens resolved (the request's, or limits.default_max_tokens): the API edge
  // checked it (common/http/request_fields.h).
  http::SamplingParams sampling;
  ModeRequest mode;  // a mode or quality floor the request asks for (the APIs' `scd` object)
  absl::Time arrived = absl::Now();
};

// A validated request, ready to run.
struct PreparedRequest {
  GenerationRequest request;
  const Specialist* specialist = nullptr;
  std::vector<int32_t> tokens;    // the whole prompt
  std::vector<std::string> stop;  // the request's stop strings plus the template's
  int max_tokens = 0;             // clamped to the context left after the prompt
  absl::Time deadline;
  std::shared_ptr<AdmissionTicket> admission;  // its place in the queues admission counts
  RequestMode mode;                            // how its context travels (mode_selection.h)
};

struct GenerationDelta {
  std::string text;
  std::vector<int32_t> token_ids;  // the tokens behind `text` (stop-string text excluded)
};

// Where a request's output goes. Called on the thread running Run.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // False when the client is gone: the pipeline cancels the request.
  virtual bool OnDelta(const GenerationDelta& delta) = 0;
  // Polled while waiting; true when the client is gone.
  virtual bool Cancelled() = 0;
};

struct GenerationOutcome {
  std::string finish_reason;  // "stop" or "length"
  int prompt_tokens = 0;
  int completion_tokens = 0;
  scd::v1::Timings timings;
  std::string decode_instance;
};

struct GenerationPipelineOptions {
  absl::Duration request_timeout = absl::Minutes(5);
  int producer_max_queue = 64;  // requests waiting for the base model; more get 429
  // The time to first token admission keeps admitted requests under, refusing the rest at
  // once (429, admission.h); zero turns that off (limits.max_queue_wait).
  absl::Duration max_queue_wait = absl::Seconds(5);
  size_t inline_max_bytes = 0;  // payloads up to this size ride in the RPC, not the data plane
  // Prefix cache: a hit is used only when the consumer's own prefill stays this short.
  int max_consumer_suffix = 128;
  bool prefix_cache = true;
  // On a cache miss, the payload covers the prompt up to its last multiple of this many tokens
  // (when at least one), and the decode daemon prefills the rest — the partial last block and
  // the question — with its own weights, exactly as on a block-granular cache hit. Cold and
  // warm requests then see the same split, and the payload is the cacheable one. 0: the
  // payload covers all but the last token.
  int payload_block_tokens = 16;
  rpc::ChannelOptions decode_channel;  // TLS etc. for calls to decode daemons
  // Times a request whose decode daemon fails mid-stream is resent, with the tokens already
  // streamed, to another replica (limits.migration_limit); past it the client gets the error.
  int migration_limit = 1;
};

class GenerationPipeline {
 public:
  // Nothing is owned but `sender`; everything else must outlive the pipeline. The producer
  // backend is used by one request at a time.
  GenerationPipeline(GenerationPipelineOptions options, Backend* producer,
                     const Tokenizer* tokenizer,
                     const std::map<std::string, std::unique_ptr<Specialist>>* specialists,
                     rpc::DecodeRegistry* registry, PrefixCache* cache,
                     std::unique_ptr<PayloadSender> sender, metrics::Registry* metrics);
  ~GenerationPipeline();

  absl::StatusOr<PreparedRequest> Prepare(GenerationRequest request);
  absl::StatusOr<GenerationOutcome> Run(const PreparedRequest& request, GenerationSink& sink);

  // Fan-out: `request` prepared for each of `models`, in order. INVALID_ARGUMENT naming
  // `field` (the API's name of the list) unless they are 1 to http::kMaxFanout distinct names
  // with the request's `model` among them. The first's mode is chosen as Prepare chooses it; a
  // later specialist whose payload of that mode and rung would be the same bytes (one shared
  // basis: the same pair tag) is pinned to it, unless the request pins a mode itself, so that
  // one payload serves them all.
  absl::StatusOr<std::vector<PreparedRequest>> PrepareFanout(const GenerationRequest& request,
                                                             const std::vector<std::string>& models,
                                                             std::string_view field);
  // Runs `requests` (PrepareFanout's) at once, each to its own sink and decode daemon; those
  // whose payload is the first's bytes (the same tokens, pair tag, mode and rung) reuse the
  // first's payload, built once: one prefill and one encode for all. An outcome per request.
  std::vector<absl::StatusOr<GenerationOutcome>> RunFanout(
      const std::vector<PreparedRequest>& requests, const std::vector<GenerationSink*>& sinks);

  int in_flight() const { return in_flight_.load(); }

 private:
  struct Encoded {
    std::vector<uint8_t> bytes;  // empty: no payload (the consumer prefills everything)
    std::vector<int32_t> suffix;
    bool cache_hit = false;
    bool fallback = false;  // the oracle retry of a failed payload path
  };
  struct Metrics;
  struct StreamState;
  struct DecodeStream;
  struct Attempts;
  absl::StatusOr<Encoded> BuildPayload(const PreparedRequest& r, scd::v1::Timings* timings);
  using BuildFn = std::function<absl::StatusOr<Encoded>(scd::v1::Timings*)>;
  // Run, its payload from `build`.
  absl::StatusOr<GenerationOutcome> RunWith(const PreparedRequest& r, GenerationSink& sink,
                                            const BuildFn& build);
  absl::StatusOr<GenerationOutcome> Dispatch(const PreparedRequest& r, const Encoded& payload,
                                             const scd::v1::Timings& timings, GenerationSink& sink);
  // One attempt on one decode daemon, continuing `state` (what earlier attempts streamed).
  // *payload_failure names a failure of the payload path ("data_plane", "data_loss",
  // "payload_missing", "rebuild"), empty for any other.
  absl::Status Attempt(const PreparedRequest& r, const Encoded& payload,
                       const rpc::DecodeLease& lease, GenerationSink& sink, StreamState& state,
                       GenerationOutcome* outcome, std::string* payload_failure);
  // The attempt's request to the daemon at `route`; a payload too large to go inline is sent
  // on the data plane first (its time in outcome's timings).
  absl::Status FillDecodeRequest(const PreparedRequest& r, const Encoded& payload,
                                 const StreamState& state, const rpc::DecodeRoute& route,
                                 scd::v1::DecodeRequest* req, GenerationOutcome* outcome);
  // After a failed attempt (in a.last): OK when another attempt is set up, else the error
  // the request ends with.
  absl::Status NextAttempt(const PreparedRequest& r, Attempts& a, const std::string& instance,
                           const std::string& payload_failure, rpc::DecodeLease lease);
  // Switches the attempts to oracle when a failed payload path allows it; false otherwise.
  bool FallBack(const PreparedRequest& r, Attempts& a);
  absl::StatusOr<GenerationOutcome> Fail(const PreparedRequest& r, absl::Status st);
  GenerationOutcome Succeed(const PreparedRequest& r, const Encoded& payload,
                            GenerationOutcome outcome);
  void CountMigrations(const std::string& model, int migrations, const std::string& outcome);
  std::shared_ptr<scd::v1::Decode::Stub> StubFor(const std::string& rpc_address);
  void CountError(const std::string& model, const absl::Status& st);
  // A completed request's decode-side times, for admission's estimate.
  void ObserveDecode(const PreparedRequest& r, const GenerationOutcome& outcome);

  const GenerationPipelineOptions options_;
  Backend* const producer_;
  const Tokenizer* const tokenizer_;
  const std::map<std::string, std::unique_ptr<Specialist>>* const specialists_;
  rpc::DecodeRegistry* const registry_;
  PrefixCache* const cache_;
  std::unique_ptr<PayloadSender> sender_;
  std::unique_ptr<Metrics> metrics_;
  ModeMetrics mode_metrics_;
  std::unique_ptr<PrefixCache> seen_;  // mode: auto's record of contexts (ModeContext::seen)
  Admission admission_;

  std::mutex producer_mu_;  // one base-model prefill at a time
  std::atomic<int> producer_waiting_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<uint64_t> next_transfer_id_;

  std::mutex stubs_mu_;
  std::map<std::string, std::shared_ptr<scd::v1::Decode::Stub>> stubs_;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_GENERATION_PIPELINE_H_
