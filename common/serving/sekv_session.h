// SekvSession: one decode request served through the SEKV hierarchy
// (common/sekv/sekv_cache.h) instead of the backend's flat KV cache.
//
// Start():
//   1. the payload's K/V is rebuilt by the consumer codec exactly as on the plain path, but
//      through a KvCaptureBackend, which keeps the rebuilt pre-RoPE K/V (every mode whose
//      rebuild is one AppendKv per chunk of rows: raw, quant8, quant4, scd-reuse, scd). An
//      oracle payload or no
//      payload at all is prefilled by the consumer itself, with its own surprisal;
//   2. the suffix except its last token is prefilled on the backend after it (the consumer's
//      own surprisal for those tokens; the first has no prediction and gets 0);
//   3. the prompt so far becomes a SekvCache at `budget` (budget_plan.h): the segmentation uses
//      the producer's per-token surprisal, which the SCD payload carries (block kSurprisal);
//      the backend sequence is freed;
//   4. the last suffix token is decoded through the cache (SekvDecoder), which also picks the
//      observation-window anchors with that query, and its logits give the first token.
// The decode engine runs them as three stages (Prepare as SekvPrefill, in chunks between its
// decode steps; Build; Activate): step 3's host work (seconds at long prompts) on a thread of
// its own, so that the running requests keep decoding meanwhile. Step() then decodes one token at a
// time through the cache. On a CUDA backend (with options.gpu) the decode runs on the GPU: the
// model on the device and the cache's GPU tier mirrored there (sekv::GpuSekv,
// common/sekv/gpu_sekv.h), with planning and the CPU tier on the host. Otherwise it runs on the CPU
// (SekvDecoder). memory() reports the tiers from the structures that hold them (measured after the
// first step): on the GPU path the device's rows in its element type against the backend's BF16
// full cache (GpuSekv::Memory), else the host cache's (SekvCache::Memory).
//
// Not supported: recompute payloads (their rebuild fills a block of layers inside the backend,
// which the capture cannot see) and payloads that do not start at position 0.
#ifndef SCD_COMMON_SERVING_SEKV_SESSION_H_
#define SCD_COMMON_SERVING_SEKV_SESSION_H_

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"
#include "common/scd/codec.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/gpu_sekv.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/sekv_decoder.h"
#include "common/sekv/zoom_router.h"
#include "common/serving/payload_chunks.h"
#include "common/serving/prompt_chunks.h"

namespace scd {

// Where Start() spent its time, in the decode engine's stages (decode_engine.h):
//   rebuild_ms         the payload's rebuild (an oracle payload: the consumer's prefill of its
//                      tokens);
//   suffix_prefill_ms  the prefill of the suffix but its last token, and the last token's step
//                      through the cache;
//   build_ms           the hierarchy: segmentation and plan, span summaries and CPU-tier bases
//                      (SekvCache), their registration with the device, and the GPU mirror
//                      (GpuSekv). Long prompts pay seconds here.
struct SekvStartTimes {
  double rebuild_ms = 0;
  double suffix_prefill_ms = 0;
  double build_ms = 0;
};

struct SekvServingOptions {
  bool enabled = false;
  // GPU-tier bytes as a fraction of the request's full KV cache (range: sekv::CheckBudget).
  double budget = sekv::kDefaultBudget;
  std::shared_ptr<const sekv::ZoomRouter> router;  // null: the default share-threshold gate
  sekv::SekvOptions cache;                         // segmenter, CPU tier, zoom-in
  sekv::BudgetShares shares;
  bool gpu = true;  // on a CUDA backend, decode on the GPU (sekv::GpuSekv); else on the CPU
  sekv::GpuTier gpu_tier = sekv::GpuTier::kBf16;    // the device tier's K/V element type
  sekv::GpuZoom gpu_zoom = sekv::GpuZoom::kDevice;  // where the GPU path's zoom-in selects
  // Host memory for the SEKV requests' prompts and hierarchies (0: host_memory_fraction's
  // share). A request reserves a bound on its build's peak when it is admitted: its prompt's
  // K/V in F32 (as its prefill captures it), the most its hierarchy can hold whatever the
  // prompt's surprisal (sekv::MaxHostBytes: the GPU tier's host rows at `budget`, a CPU tier
  // of at most (min(r_max, head_dim) + head_dim) / head_dim times the K/V), and its window's
  // room for the positions to come. Once built it keeps what its host cache holds (both
  // tiers, and that room), which is less. Admission waits for it as for the KV budget
  // (DecodeEngineOptions::kv_budget_bytes), so the reservations never pass the budget. On the
  // GPU path a built request also keeps its mirror's host memory (SekvSession::
  // mirror_host_bytes): its pinned staging, which the reservation bounds
  // (sekv::GpuSekv::PlanHostBytes), and a pinned copy of the CPU tier where the driver refuses
  // to register it, made once the captured K/V is gone. So where the device does not read
  // pageable memory (a copy may come), the reservation also holds the CPU tier's bound less
  // that K/V, when positive.
  int64_t max_host_bytes = 0;
  // With max_host_bytes 0: that share of the host memory available when the engine is created
  // (HostMemoryAvailable, common/base/host_memory.h: MemAvailable, within the process's cgroup
  // limit; DecodeEngineOptions::host_memory_now in tests), as the KV budget is a share of the
  // device's free memory. 0: no limit.
  double host_memory_fraction = 0.5;  // in [0, 1]
  // Prompts (payload tokens and suffix) shorter than this take the plain path instead: a full
  // KV cache on the backend, decoded in its batched step. A short context gains little from
  // the hierarchy and would pay for its build before its first token. 0: every prompt.
  int min_prompt_tokens = 0;
  // Optional, called on the engine thread: with started = true after a SEKV request's first
  // step, with its cache's bytes; with started = false and the same bytes when it ends.
  std::function<void(const sekv::MemoryBreakdown& bytes, bool started)> on_cache;
  // Optional, called on the thread that builds a request's hierarchy (Build), before it
  // starts: tests hold a build with it to see the engine keep decoding meanwhile.
  std::function<void()> before_build;
  // Optional, called on the same thread once the hierarchy is built, before the engine can
  // take it: tests hold builds with it so that they end together.
  std::function<void()> after_build;
  // Optional, called on the decode engine's releasing thread before it frees a finished
  // request's hierarchy: tests hold a release with it, as they hold a build.
  std::function<void()> before_release;
};

// A SEKV request's prompt after Start's steps 1-2: its pre-RoPE K/V and per-token surprisal
// (positions [0, kv.num_tokens)), the suffix's last token still to decode, and the time spent.
struct SekvPrompt {
  ExternalKv kv;
  std::vector<float> surprisal;
  int32_t last_token = -1;
  SekvStartTimes times;
};

// Prepare (steps 1-2) in pieces, so that the decode engine can rebuild a long payload and
// prefill a long SEKV prompt in chunks between the running requests' decode steps
// (DecodeEngineOptions::rebuild_chunk and prefill_chunk):
//   Begin           the checks, the backend sequence and a payload's surprisal; `codec`
//                   must outlive the SekvPrefill;
//   AdvanceRebuild  rebuilds the payload's next rows (every mode but oracle), about
//                   `max_rows` (PayloadChunks::Advance), capturing their K/V;
//   Advance         once the rebuild is done: prefills the next tokens still to prefill, at
//                   most `max_tokens`: an oracle payload's, then the suffix but its last
//                   token. A call never spans the oracle payload's end, so that rebuild_ms and
//                   suffix_prefill_ms keep their meaning;
//   Take            once done(): the prompt, with the pieces' K/V and surprisal in a row (the
//                   backend's surprisal of a call's first token comes from the previous call's
//                   logits, so chunks give what one prefill gives). The sequence is freed.
class SekvPrefill {
 public:
  static absl::StatusOr<std::unique_ptr<SekvPrefill>> Begin(Backend& backend,
                                                            const ConsumerCodec& codec,
                                                            std::optional<Payload> payload,
                                                            absl::Span<const int32_t> suffix);
  absl::StatusOr<size_t> AdvanceRebuild(size_t max_rows);  // rows rebuilt; max_rows >= 1
  absl::StatusOr<size_t> Advance(size_t max_tokens);       // tokens prefilled; max_tokens >= 1
  size_t rebuild_remaining() const { return rebuild_.remaining(); }
  size_t remaining() const { return chunks_.remaining(); }  // tokens still to prefill
  bool done() const { return rebuild_remaining() == 0 && remaining() == 0; }
  SekvPrompt Take();

 private:
  SekvPrefill(Backend& backend, const ConsumerCodec& codec) : backend_(backend), codec_(codec) {}
  // Appends n rows per layer of K/V (row-major [n, kv_dim] each) to the prompt.
  absl::Status AppendRows(const std::vector<std::vector<float>>& k,
                          const std::vector<std::vector<float>>& v, size_t n);

  Backend& backend_;
  const ConsumerCodec& codec_;
  std::unique_ptr<Sequence> seq_;
  PayloadChunks rebuild_;  // the payload's rows left to rebuild
  PromptChunks chunks_;    // then the tokens left to prefill
  SekvPrompt prompt_;
};

class SekvSession {
 public:
  // Steps 1-4 above: Prepare, Build and Activate in a row. `payload` may be null (suffix
  // only). Writes the logits that follow the prompt (the first generated token's
  // distribution) into `logits`.
  static absl::StatusOr<std::unique_ptr<SekvSession>> Start(
      Backend& backend, const ConsumerCodec& codec, sekv::SekvDecoder& decoder,
      const Payload* payload, absl::Span<const int32_t> suffix, const SekvServingOptions& options,
      std::vector<float>* logits);

  // The three stages one by one, so that the host-only build (seconds at long prompts) can
  // run off the thread that drives the backend (the decode engine keeps stepping the other
  // requests meanwhile):
  //   Prepare   steps 1-2, on the backend's thread (SekvPrefill in one piece);
  //   Build     step 3's hierarchy (SekvCache) from the prompt; no backend work, so any
  //             thread may run it (the decoder is only read);
  //   Activate  step 3's device mirror (GpuSekv, when it applies) and step 4, on the
  //             backend's thread, once; `logits` as Start's.
  static absl::StatusOr<SekvPrompt> Prepare(Backend& backend, const ConsumerCodec& codec,
                                            const Payload* payload,
                                            absl::Span<const int32_t> suffix);
  //   `tier` is TierFor(the backend, decoder, options): the plan fits the tier Activate will
  //   use into the budget. Given the backend (only read here), Build also registers the CPU
  //   tier with its device when Activate's mirror will zoom there (GpuSekv::MapCpuTier):
  //   pinning the pages takes time, which the backend's thread then does not spend.
  //   `positions_to_come` (> 0): the most positions the session will step, the prompt's last
  //   token included; the window is sized for them at once (SekvOptions::generated_reserve,
  //   and the device mirror's without slack), so the mirror's device memory never grows.
  static absl::StatusOr<std::unique_ptr<SekvSession>> Build(
      sekv::SekvDecoder& decoder, SekvPrompt prompt, const SekvServingOptions& options,
      const sekv::TierOverhead& tier, const Backend* backend = nullptr, int positions_to_come = 0);
  // The GPU tier's overheads (sekv::GpuSekv::PlanOverhead) when `options` decode on
  // `backend`'s device; the host tier's (none) otherwise.
  static sekv::TierOverhead TierFor(const Backend& backend, const sekv::SekvDecoder& decoder,
                                    const SekvServingOptions& options);
  absl::Status Activate(Backend& backend, const SekvServingOptions& options,
                        std::vector<float>* logits);

  // Decodes `token` at the next position; next-token logits into `logits`.
  absl::Status Step(int32_t token, std::vector<float>* logits);
  // Step for several sessions at once, in one step of the model: sessions[i] decodes tokens[i]
  // and its logits go to (*logits)[i]. The layers' weights are read once for the batch, not
  // once per session (SekvDecoder::StepBatch on the CPU, GpuSekv::StepBatch on the GPU);
  // each session's attention still goes through its own hierarchy. The sessions are all on
  // the GPU (of one backend) or all on the CPU (of one decoder). If the step fails, every
  // session of the batch is left mid-step and takes no more steps.
  static absl::Status StepBatch(absl::Span<SekvSession* const> sessions,
                                absl::Span<const int32_t> tokens,
                                std::vector<std::vector<float>>* logits);

  // StepBatch in the same model step as `backend`'s own sequences (Backend::DecodeMixed):
  // seqs[i] decodes seq_tokens[i], sampled with draws[i] into (*next)[i]; sessions[i] decodes
  // tokens[i], its logits into (*logits)[i]. The weights are read once for both kinds of rows
  // instead of once per kind. Every session must share `backend`'s step (SharesStep). If the
  // step fails, every sequence is left as it was and every session mid-step, as StepBatch's.
  static absl::Status StepMixed(Backend& backend, absl::Span<Sequence* const> seqs,
                                absl::Span<const int32_t> seq_tokens,
                                absl::Span<const SampleDraw> draws, std::vector<int32_t>* next,
                                absl::Span<SekvSession* const> sessions,
                                absl::Span<const int32_t> tokens,
                                std::vector<std::vector<float>>* logits);
  // Whether this request's rows can run in `backend`'s own step (StepMixed): on the GPU, its
  // mirror was made on `backend`; on the CPU, `backend` is the CPU backend of its decoder's
  // model.
  bool SharesStep(const Backend& backend) const;

  int length() const { return length_; }  // positions held: prompt + decoded tokens
  const sekv::MemoryBreakdown& memory() const { return memory_; }  // after the first step
  const SekvStartTimes& start_times() const { return start_times_; }
  const sekv::SekvCache& cache() const { return *cache_; }
  bool on_gpu() const { return gpu_ != nullptr; }
  // The device memory the GPU mirror holds (GpuSekv::DeviceBytes); 0 off the GPU.
  size_t device_bytes() const { return gpu_ != nullptr ? gpu_->DeviceBytes() : 0; }
  // The host memory the GPU mirror holds beside the host cache (GpuSekv::HostBytes: its pinned
  // staging and any pinned copy of the CPU tier); 0 off the GPU.
  size_t mirror_host_bytes() const { return gpu_ != nullptr ? gpu_->HostBytes() : 0; }
  // How the GPU mirror reads the CPU tier (kNone off the GPU or with the host zoom).
  sekv::CpuTierAccess cpu_tier_access() const {
    return gpu_ != nullptr ? gpu_->cpu_tier_access() : sekv::CpuTierAccess::kNone;
  }
  // Why the device refused to register the CPU tier (OK when it did not).
  absl::Status registration_error() const {
    return gpu_ != nullptr ? gpu_->registration_error() : absl::OkStatus();
  }
  // Frees the device mirror (GpuSekv) now, on the backend's thread; the session takes no
  // more steps. Its host structures go with the session.
  void ReleaseDevice() { gpu_.reset(); }

 private:
  explicit SekvSession(sekv::SekvDecoder& decoder) : decoder_(decoder) {}

  sekv::SekvDecoder& decoder_;
  std::unique_ptr<sekv::SekvCache> cache_;  // copies what it keeps of the prompt's K/V
  // cache_'s CPU tier registered with the device (Build), for gpu_; goes after gpu_ and before
  // cache_.
  std::unique_ptr<sekv::CpuTierMapping> mapping_;
  std::unique_ptr<sekv::GpuSekv> gpu_;  // mirrors cache_ on the device (destroyed first)
  sekv::MemoryBreakdown memory_;
  SekvStartTimes start_times_;
  int length_ = 0;
  int32_t last_token_ = -1;    // until Activate: the suffix's last token
  int positions_to_come_ = 0;  // Build's
};

// The producer's per-token surprisal from a payload's kSurprisal block; NOT_FOUND when the
// payload carries none.
absl::StatusOr<std::vector<float>> PayloadSurprisal(const Payload& payload);

}  // namespace scd

#endif  // SCD_COMMON_SERVING_SEKV_SESSION_H_
