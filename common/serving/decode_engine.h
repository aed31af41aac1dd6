// DecodeEngine: the decode daemon's generation loop with continuous batching (Orca-style
// iteration-level scheduling). Requests arrive with an SCD payload (any codec mode) plus the
// suffix tokens the consumer prefills itself. One loop thread owns the Backend:
//   admit  — rebuild the payload's KV (ConsumerCodec) in chunks of at most
//            options.rebuild_chunk rows per loop iteration; then what is left to prefill (the
//            suffix, and an oracle payload's tokens) in chunks of at most
//            options.prefill_chunk tokens per loop iteration; one decode step of the running
//            requests between chunks (chunked prefill, as vLLM's and SGLang's), so a long
//            prompt never stalls the running streams for its whole length; then token 1;
//   step   — one batched Decode over every running sequence, sample, emit;
//   retire — on a stop id, max_tokens, deadline or cancellation, free the sequence;
//   shadow — with no live request at all, a piece of the shadow oracle's work (quality
//            samples of served requests: shadow_oracle.h, DecodeEngineOptions::shadow).
// Newly admitted requests join the running batch at the next step, so a long generation never
// blocks a short one. Admission keeps the requests' KV caches within a budget of the device's
// memory (DecodeEngineOptions::kv_budget_bytes): the rest wait in the queue, in order (but
// for plain requests behind a SEKV request that waits for host memory alone; see
// NextPastHead).
// Every request ends with exactly one terminal event (done or error).
// With options.sekv.enabled, admission builds a SEKV cache instead (sekv_session.h) for
// prompts of at least sekv.min_prompt_tokens (shorter ones take the path above): the
// prompt is prefilled in chunks the same way (SekvPrefill), the hierarchy built on a thread of
// its own, and those requests decode through it together, in one batched step of their own
// after the backend's (SekvSession::StepBatch), or in the backend's step itself when they
// decode on its device (SekvSession::StepMixed).
// A finished request's hierarchy is freed on another thread (releaser_) too: its device
// mirror on the loop thread, its host structures (tens of thousands of allocations per layer)
// off it.
#ifndef SCD_COMMON_SERVING_DECODE_ENGINE_H_
#define SCD_COMMON_SERVING_DECODE_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/background_queue.h"
#include "common/runtime/backend.h"
#include "common/runtime/sampler.h"
#include "common/scd/codec.h"
#include "common/serving/sekv_session.h"
#include "common/serving/shadow_oracle.h"

namespace scd {

struct DecodeTimings {
  double queue_ms = 0;           // submit → admission
  double rebuild_ms = 0;         // payload → KV cache
  double suffix_prefill_ms = 0;  // the consumer's own prefill of the suffix
  double sekv_build_ms = 0;      // the SEKV path: the hierarchy (SekvStartTimes::build_ms)
  double first_token_ms = 0;     // submit → first token
};

// One event of a request's stream. Exactly one event with `final` set ends the stream.
struct DecodeEvent {
  enum class Kind { kToken, kDone, kError };
  Kind kind = Kind::kToken;
  int32_t token = -1;         // kToken
  std::string finish_reason;  // kDone: "stop", "length", "context"
  absl::Status error;         // kError
  int prompt_tokens = 0;      // kDone
  int completion_tokens = 0;  // kDone
  DecodeTimings timings;      // kDone, and the first kToken (admission stages)
  bool final() const { return kind != Kind::kToken; }

  static DecodeEvent Token(int32_t id) {
    DecodeEvent e;
    e.token = id;
    return e;
  }
  static DecodeEvent Done(std::string reason) {
    DecodeEvent e;
    e.kind = Kind::kDone;
    e.finish_reason = std::move(reason);
    return e;
  }
  static DecodeEvent Error(absl::Status status) {
    DecodeEvent e;
    e.kind = Kind::kError;
    e.error = std::move(status);
    return e;
  }
};

using DecodeCallback = std::function<void(const DecodeEvent&)>;

struct DecodeJob {
  uint64_t request_id = 0;
  std::vector<uint8_t> payload;  // serialized SCD payload; may be empty (suffix only)
  std::vector<int32_t> suffix;   // tokens after the payload's; at least one
  SamplingParams sampling;
  int max_tokens = 64;
  std::vector<int32_t> stop_ids;  // empty = the model's EOS ids
  absl::Time deadline = absl::InfiniteFuture();
  // A migrated request: the last `resumed` suffix tokens were generated elsewhere; the
  // sampler skips their draws so that a seeded request continues its random stream.
  int resumed = 0;
};

// Tests: one piece of the loop's work, timed (DecodeEngineOptions::trace).
struct EngineTrace {
  enum class Kind { kStep, kShadowPiece };
  Kind kind = Kind::kStep;
  std::chrono::steady_clock::time_point start, end;
  int live = 0;  // live requests at its start: running, starting or queued
};

struct DecodeEngineOptions {
  int max_batch = 16;   // running sequences per decode step
  int max_queue = 256;  // waiting requests; Submit fails with RESOURCE_EXHAUSTED beyond
  // Lower bound on the time of one decode step (the engine sleeps out the rest). Zero runs
  // flat out; a positive value emulates a slower accelerator, so that benchmarks and fault
  // tests can hold requests mid-stream on a model as small as the bundled one.
  absl::Duration min_step_interval = absl::ZeroDuration();
  // Prompt tokens prefilled per loop iteration, over the requests being admitted (first come
  // first served); 0: each prompt whole at once.
  int prefill_chunk = 2048;
  // Payload rows rebuilt per loop iteration, likewise (rounded to the payload's granularity,
  // PayloadRowGranularity); 0: each payload whole at once. A row's rebuild costs a fraction
  // of a token's prefill (about a fifth or less on a GPU, SCD's target; RESULTS.md).
  int rebuild_chunk = 8192;
  // Memory for the admitted requests' KV caches. Each request reserves
  // Backend::SequenceBytes of its capacity (prompt + max_tokens positions) when it is
  // admitted, until it ends. A SEKV request needs that much too while its prompt is
  // prefilled into a full cache; once its hierarchy is mirrored on the device it keeps only
  // the mirror's device memory (GpuSekv::DeviceBytes, its window sized at once for every
  // position to come), so more SEKV requests fit. On the CPU SEKV path it keeps none once
  // built where the SEKV host budget holds its hierarchy (SekvServingOptions::max_host_bytes),
  // else the full reservation. Queued requests are admitted in order, each only when its
  // reservation fits beside the others'; until then it waits (cancellations and deadlines
  // still end it). A request that could never fit fails Submit with
  // RESOURCE_EXHAUSTED. 0: kv_memory_fraction of the device's free memory when the engine is
  // created, after the weights are loaded and the backend's scratch memory for the engine's
  // largest calls is reserved (WorkspaceFor, DecodeEngineStats::workspace_device_bytes), and
  // the codec's GPU rebuild for a payload chunk (DecodeEngineStats::rebuild_device_bytes). On a
  // backend whose memory is the host's (the CPU backend, Backend::DeviceMemoryNow UNIMPLEMENTED):
  // that share of the host's available memory (HostMemoryAvailable, common/base/host_memory.h) less
  // the SEKV host budget, which takes from the same memory. No limit with kv_memory_fraction 0, or
  // on a host whose memory is unknown.
  int64_t kv_budget_bytes = 0;
  double kv_memory_fraction = 0.9;  // in [0, 1]
  // Optional, for tests: what the engine reads instead of HostMemoryAvailable() (once, for
  // both the KV budget on the CPU backend and SekvServingOptions::host_memory_fraction).
  std::function<absl::StatusOr<int64_t>()> host_memory_now;
  SekvServingOptions sekv;  // off by default
  // The shadow oracle (shadow_oracle.h): off by default. It samples requests with a payload
  // that the plain path serves from position 0 (not SEKV's, not migrated ones); its work runs
  // only while the engine has no live request, and its sequences' memory counts in the KV
  // budget while a sample is under way.
  ShadowOptions shadow;
  // Tests: called on the loop thread after each decode step and shadow piece.
  std::function<void(const EngineTrace&)> trace;
};

struct DecodeEngineStats {
  long admitted = 0, completed = 0, failed = 0, cancelled = 0, steps = 0;
  long max_batch_seen = 0;
  // Backend prefills of prompt tokens (a prompt takes one or more; SEKV prompts too), and
  // the tokens they prefilled.
  long prefill_chunks = 0, prefill_tokens = 0;
  // Rebuilds of payload rows (a payload takes one or more; oracle payloads none: their
  // tokens are prefilled), and the rows they rebuilt.
  long rebuild_chunks = 0, rebuild_rows = 0;
  // SEKV requests started, and their caches' bytes summed over them, each measured after
  // its first decode step (gpu / full_kv is the GPU-tier ratio; cpu is the CPU tier).
  long sekv_requests = 0;
  double sekv_gpu_bytes = 0, sekv_full_kv_bytes = 0, sekv_cpu_bytes = 0;
  // The GPU mirrors' device memory, summed over the SEKV requests decoded on the GPU: each
  // request's KV reservation once built (GpuSekv::DeviceBytes: its rows, the window's room
  // for every position to come, and its tables and workspaces).
  double sekv_device_bytes = 0;
  // SEKV requests whose GPU mirror reads a pinned copy of the CPU tier, as the device refused
  // to register it where it lies (GpuSekv::cpu_tier_access), and the last refusal.
  long sekv_cpu_tier_copies = 0;
  std::string sekv_cpu_tier_copy_reason;
  // The GPU mirrors' host memory beside the host caches, summed over the SEKV requests decoded
  // on the GPU (GpuSekv::HostBytes: pinned staging and any pinned copy of the CPU tier).
  double sekv_mirror_host_bytes = 0;
  // Steps that decoded SEKV requests (one batched step of all of them each), the rows they
  // decoded in all, and the most in one step.
  long sekv_steps = 0, sekv_step_rows = 0, sekv_max_step_rows = 0;
  // Steps that decoded SEKV requests and the backend's own sequences in one model step
  // (SekvSession::StepMixed: the weights read once for both kinds).
  long mixed_steps = 0;
  // The KV budget (DecodeEngineOptions::kv_budget_bytes as resolved; 0: no limit), the bytes
  // the admitted requests reserve now, and the requests that waited in the queue for KV
  // memory (each counted once).
  int64_t kv_budget_bytes = 0, kv_reserved_bytes = 0;
  long kv_waits = 0;
  // Whether kv_budget_bytes is a share of the host's memory (the CPU backend's) rather than
  // the device's or given.
  bool kv_budget_of_host = false;
  // The SEKV host-memory budget (SekvServingOptions::max_host_bytes as resolved, with
  // host_memory_fraction; 0: no limit), the reservations now, and the requests that waited
  // for it (each counted once; also counted in kv_waits).
  int64_t sekv_host_budget_bytes = 0, sekv_host_reserved_bytes = 0;
  long sekv_host_waits = 0;
  // Plain requests admitted past a queue head that waited for SEKV host memory alone (each
  // once): they need none, and the KV memory the head needs stays free.
  long admitted_past_host_wait = 0;
  // The backend's scratch memory (Backend::Workspace), reserved when the engine was created
  // for its largest calls (DecodeEngine::WorkspaceFor), before the KV budget's reading.
  int64_t workspace_device_bytes = 0, workspace_host_bytes = 0;
  // The same for the codec's GPU rebuild of scd and scd-reuse payloads (its decoders, aligners
  // and buffers for a payload chunk, ConsumerCodec::ReserveRebuild), as of the last step: it
  // grows only for a payload that patches a layer outside the artifact's selection.
  int64_t rebuild_device_bytes = 0, rebuild_host_bytes = 0;
  DecodeGraphStats graphs;  // the backend's, as of the last step
};

class DecodeEngine {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeEngine>> Create(std::unique_ptr<Backend> backend,
                                                              std::unique_ptr<ConsumerCodec> codec,
                                                              DecodeEngineOptions options);
  // The largest backend calls an engine with `options` makes on a model of `config`: a
  // prompt chunk (prefill_chunk, or a whole prompt of max_position_embeddings; with SEKV's
  // K/V and surprisal where SEKV is on), a decode step of max_batch rows at up to
  // max_position_embeddings positions, a payload chunk (rebuild_chunk, likewise). Create
  // reserves the backend's scratch memory for them (Backend::ReserveWorkspace).
  static WorkspaceShape WorkspaceFor(const ModelConfig& config, const DecodeEngineOptions& options);
  ~DecodeEngine();  // drains: running requests finish with an error, then the loop stops

  // Queues a job; `callback` runs on the engine thread for each event.
  absl::Status Submit(DecodeJob job, DecodeCallback callback);
  // Cancels a queued or running request; it ends with a CANCELLED error event.
  void Cancel(uint64_t request_id);
  // Stops admitting, lets running and queued requests finish, then stops the loop.
  void Drain();

  int running() const { return running_count_.load(); }
  // Of running(): requests whose prompt is still being prefilled (or, on the SEKV path, whose
  // hierarchy is being built), so not yet generating.
  int starting() const { return starting_count_.load(); }
  int queued() const;
  DecodeEngineStats stats() const;
  const Model& model() const { return backend_->model(); }

 private:
  struct Active;  // decode_engine_request.h
  class HostReading;
  DecodeEngine(std::unique_ptr<Backend> backend, std::unique_ptr<ConsumerCodec> codec,
               DecodeEngineOptions options);
  // Create's steps: the backend's and the codec's scratch memory for the largest calls; the
  // SEKV decoder, tier and host budget (options_.sekv.enabled); the device KV budget.
  absl::Status ReserveScratch();
  absl::Status SetUpSekv(HostReading& host);
  absl::Status ResolveKvBudget(HostReading& host);
  void Loop();
  // Under mu_ (held by `lock`): waits until the loop has work, stopping_ included.
  void WaitForWork(std::unique_lock<std::mutex>& lock);
  // Under mu_: moves the queue's expired requests to `expired`, and those that may start now
  // (their reservations taken) to `admitted`.
  void TakeFromQueue(std::vector<std::unique_ptr<Active>>* admitted,
                     std::vector<std::unique_ptr<Active>>* expired);
  int AdmittedCount() const;  // requests in running_, building_ and prefilling_
  // After the loop: every request still held ends with an error.
  void ShutDown();
  void Admit(std::unique_ptr<Active> a);
  // Under mu_: reserves the KV memory (and SEKV host memory) of the queue's head when it
  // fits; false when it must wait (counted once in stats_.kv_waits, sekv_host_waits).
  bool ReserveKv(Active& head);
  // Under mu_: the first queued request admitted before the queue's head (queue_.end():
  // none): the head waits for SEKV host memory alone (its KV fits), the request needs none,
  // and its KV reservation leaves the head's free (the loop also leaves the head a batch slot).
  std::deque<std::unique_ptr<Active>>::iterator NextPastHead();
  // Whether a prompt of `prompt_tokens` takes the SEKV path (SekvServingOptions::enabled and
  // min_prompt_tokens).
  bool UsesSekv(int64_t prompt_tokens) const;
  int64_t HostBudget() const;  // host_budget_ (set on the SEKV path only); 0: none
  // Whether `a`'s device KV (host) reservation fits beside the admitted requests'.
  bool DeviceFits(const Active& a) const;
  bool HostFits(const Active& a) const;
  // Under mu_: `a` (queued) is cancelled or past its deadline at `now`; some queued request is.
  bool Expired(const Active& a, absl::Time now) const;
  bool QueueHasExpired() const;
  // SEKV requests whose hierarchy is built: activated and started, or ended.
  void CollectBuilds(const std::unordered_map<uint64_t, bool>& cancelled);
  // Up to options_.rebuild_chunk payload rows and options_.prefill_chunk prompt tokens of the
  // requests in prefilling_, oldest first; a request whose prompt is complete starts.
  void PrefillChunks(const std::unordered_map<uint64_t, bool>& cancelled);
  // A SEKV request whose prompt is prefilled: its hierarchy is built on a thread of its own.
  void StartBuild(std::unique_ptr<Active> a);
  // running_count_ and starting_count_ from the loop's lists (plus `admitted` not yet in one).
  void PublishCounts(int admitted = 0);
  // Ends `a` when it was cancelled or its deadline passed (during `stage`); true when it is
  // over.
  bool EndIfCancelled(Active& a, const std::unordered_map<uint64_t, bool>& cancelled,
                      const char* stage);
  // A request whose prompt is in place, with the logits after it: its first token.
  void Started(std::unique_ptr<Active> a, const std::vector<float>& logits);
  // A token sampled for `a`, kept for its shadow sample (the first ShadowOptions::tokens).
  void NoteShadowToken(Active& a, int32_t token);
  // One piece of shadow work, when no live request is held or waits; a sample under way gives
  // its memory up for a queued request that does not fit (ShadowOracle::Preempt).
  void RunShadow();
  void Step();
  // Takes mu_: one step's counts in stats_ (`sekv_rows`: its SEKV requests).
  void CountStep(bool mixed, size_t sekv_rows);
  void Finish(Active& a, DecodeEvent event);
  // Hands `a`'s SEKV hierarchy (running, or built for a request that ended during its build)
  // to releaser_: its device mirror is freed here, on the backend's thread, its host
  // structures on releaser_'s thread.
  void ReleaseSekv(Active& a);

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ConsumerCodec> codec_;
  DecodeEngineOptions options_;
  std::unique_ptr<sekv::SekvDecoder> sekv_decoder_;  // with options_.sekv.enabled
  sekv::TierOverhead sekv_tier_;                     // SekvSession::TierFor the backend
  BackgroundQueue releaser_;  // frees finished SEKV requests' host hierarchies off the loop
  int64_t kv_budget_ = 0;     // resolved DecodeEngineOptions::kv_budget_bytes; 0: no limit
  int64_t host_budget_ = 0;   // resolved SekvServingOptions::max_host_bytes; 0: no limit
  bool sekv_on_gpu_ = false;  // SEKV requests decode on the GPU (GpuSekv)
  // The GPU mirrors' device zoom may read a pinned copy of the CPU tier: the device does not
  // read pageable memory (GpuSekv::ReadsPageableCpuTier), so a refused registration copies it.
  bool sekv_may_copy_cpu_tier_ = false;
  std::atomic<int64_t> kv_reserved_{0};    // the admitted requests' KvReservations
  std::atomic<int64_t> host_reserved_{0};  // their SEKV host reservations

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Active>> queue_;
  std::unordered_map<uint64_t, bool> cancelled_;
  bool stopping_ = false;
  bool draining_ = false;
  DecodeEngineStats stats_;

  std::vector<std::unique_ptr<Active>> running_;    // loop thread only
  std::vector<std::unique_ptr<Active>> building_;   // loop thread only: SEKV builds under way
  std::deque<std::unique_ptr<Active>> prefilling_;  // loop thread only: prompts in chunks
  int builds_ready_ = 0;  // under mu_: building_ entries whose build thread has finished
  ShadowOracle shadow_;   // loop thread only, but for Pick
  std::atomic<int> running_count_{0};
  std::atomic<int> starting_count_{0};
  std::thread thread_;
};

}  // namespace scd

#endif  // SCD_COMMON_SERVING_DECODE_ENGINE_H_
