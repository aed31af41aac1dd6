// GpuSekv: the SEKV decode step on a CUDA backend. The model runs on the GPU
// (Backend::DecodeMixed, this object the rows' RowAttention) and each layer's attention goes
// through the SEKV hierarchy with its GPU tier on the device:
//   - device: anchors, span summaries with their per-head log counts, the recent window
//     (grows by one row per step), the observation-window anchors (pins), the routing
//     projections and gates, and the expansion rows of the current step;
//   - host: the SekvCache this object mirrors, which keeps the planning (pins, span and token
//     selection), the CPU tier (per-span low-rank bases) and the SpanFetcher (the asynchronous
//     rebuild of expanded rows, with its LRU of recent rows).
//
// One layer of one step, on the backend's stream (SekvCache's external-executor protocol):
//   1. the token's K/V join the device window; q, k, v go to pinned host memory;
//   2. first step of a layer only: the resident log-sum-exp (SekvAttention without V) comes
//      back, the host picks the pins, and the device gets their rows and the new counts;
//   3. the resident log-sum-exp again (with pins), and the gate α of every span and KV head
//      (SekvRouteGate) come back (the step's one host round trip);
//   4. the host selects the spans and tokens to expand and queues their rebuild on the
//      SpanFetcher's worker; the summaries' counts for this step go up as edits
//      (SekvSummaryStep);
//   5. the resident part of the softmax is launched on the device while the host waits for
//      the rebuilt rows: the CPU-tier fetch overlaps with the GPU's resident attention;
//   6. the rebuilt rows go up through pinned memory, their softmax runs, and MergeAttention
//      folds it into the resident one: one softmax over every entry, as SekvCache::Attend.
// With GpuZoom::kDevice (the default), steps 3-6 run on the device with nothing read back
// after the layer's first step (the pins): the gate α, then SekvZoom selects the spans, scores
// their tokens in the CPU tier's low-rank coordinates, rebuilds the kept rows straight into the
// expansion buffer and writes the step's summary counts; the expanded rows' softmax is merged
// as above. The device reads the CPU tier where it is: in place when it reads pageable host
// memory through the host's page tables (cuda::DeviceReadsPageableMemory: ATS, as on Grace
// Hopper); else each layer's arena of bases (SpanStore::basis_blocks) is registered where it
// lies (cuda::HostRegistration: page-locked and mapped, no copy; MapCpuTier, which the decode
// engine runs on the build thread, or Create itself), and only where the device refuses
// registration does it read a pinned copy made at Create (counted in Memory().cpu_bases, and
// told by cpu_tier_access()). The token's
// K/V reach the host cache's window after the step (Settle), and the zoom-ins' counts reach
// SekvCache::zoom_stats there too. So a step has one host synchronisation (the logits) instead
// of one per layer. GpuZoom::kHost is the path above, where the host selects (and the
// SpanFetcher's LRU serves repeated rows).
//
// The device tier's rows (anchors, summaries, window, pins, expanded rows) are BF16 by default,
// the CUDA backend's own KV-cache type: the tier then holds the budget's fraction of the
// backend's full cache on the device too, and the expanded rows go up at half the bytes. The
// host converts what it uploads (round to nearest even, as the device does); the token's K/V
// join the window through F32ToBf16. Scores, softmax and gate are F32 either way. With
// GpuTier::kF32 the rows are F32, as in the host cache, so the two agree to float rounding
// (tests/gpu/parity checks the layer attention against SekvCache::Attend in both tiers, and
// whole-model logits).
//
// CUDA-free header. In a build without CUDA, Applies() is false and Create is UNIMPLEMENTED.
#ifndef SCD_COMMON_SEKV_GPU_SEKV_H_
#define SCD_COMMON_SEKV_GPU_SEKV_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/sekv_cache.h"

namespace scd::sekv {

// The element type of the device tier's K/V rows.
enum class GpuTier { kBf16, kF32 };

// Where the zoom-in selects and rebuilds (see above).
enum class GpuZoom { kDevice, kHost };

// How the device zoom reads the CPU tier (see above): not at all (the zoom is on the host, or
// no layer zooms), in place through the host's page tables, in place through registrations of
// the layers' arenas, or (some of it) from a pinned copy.
enum class CpuTierAccess { kNone, kPageable, kRegistered, kPinnedCopy };
const char* CpuTierAccessName(CpuTierAccess a);  // "none", "pageable", ...

// A SekvCache's CPU tier registered with a device where it lies (see above), made before
// GpuSekv::Create (GpuSekv::MapCpuTier): pinning gigabytes of pages takes time, so the decode
// engine maps on the thread that builds the hierarchy, not on the one that steps the backend
// (SekvSession::Build). Holds no registration where the device reads pageable memory, and
// none from the first layer the device refuses on (error(); Create copies those layers). One
// made with the constructor alone registers nothing, so Create copies the whole tier (the
// benchmark times the two ways side by side). Must outlive the GpuSekv created with it, and
// go before the cache.
class CpuTierMapping {
 public:
  struct Layers;  // the registrations of each layer (gpu_sekv_impl.h)
  explicit CpuTierMapping(const SekvCache& cache);
  ~CpuTierMapping();
  CpuTierMapping(const CpuTierMapping&) = delete;
  CpuTierMapping& operator=(const CpuTierMapping&) = delete;

  const SekvCache& cache() const { return cache_; }
  // Why the device refused a registration; OK when it refused none.
  const absl::Status& error() const { return error_; }
  void set_error(absl::Status error) { error_ = std::move(error); }
  Layers& layers() const { return *layers_; }

 private:
  const SekvCache& cache_;
  std::unique_ptr<Layers> layers_;
  absl::Status error_;
};

class GpuSekv {
 public:
  // True when this build has CUDA and `backend` is a CUDA backend.
  static bool Applies(const Backend& backend);

  // What the device tier holds beyond the rows PlanBudget counts, for a cache of `shape` and
  // `options` mirrored as `tier` and `zoom`: the per-span counts on the device, with kDevice
  // the zoom's table of the CPU tier (a SpanBasisRef per span and KV head), pinned flags (a byte
  // per span token) and scratch, and F32 rows' double size against the backend's BF16 cache.
  // Planned with it, Memory().gpu_ratio() stays within the budget. In a build without CUDA,
  // the host tier's (nothing beyond the rows): the device path never applies there.
  static TierOverhead PlanOverhead(const CacheShape& shape, const SekvOptions& options,
                                   GpuTier tier, GpuZoom zoom);

  // Mirrors `cache`'s GPU tier on `backend`'s device. `cache` (not in teacher mode, no step
  // taken yet) and `backend` must outlive this object; from now on only this object steps it.
  // kDevice needs the cache's bases of rank at most cuda::kMaxBasisRank (64) and a candidate
  // budget of at most cuda::kMaxZoomCandidates (2^20) tokens. The device window holds
  // `window_slack` rows (>= 0) beyond the cache's window and generated_reserve, and when a
  // step outgrows it, twice the rows plus `window_slack` (DeviceBytes() grows then).
  // With the zoom on the device, `mapping` (from MapCpuTier for this cache, or null: Create
  // maps itself) says where the device reads the CPU tier.
  static constexpr int kDefaultWindowSlack = 256;
  static absl::StatusOr<std::unique_ptr<GpuSekv>> Create(Backend& backend, SekvCache& cache,
                                                         GpuTier tier = GpuTier::kBf16,
                                                         GpuZoom zoom = GpuZoom::kDevice,
                                                         int window_slack = kDefaultWindowSlack,
                                                         const CpuTierMapping* mapping = nullptr);

  // A bound on HostBytes() less the CPU tier's copy, for a cache of `shape` and `options` over
  // `positions` positions mirrored as `tier` and `zoom`: the pinned staging (of which the
  // (KV head, span) tables take at most a span per position) and the pins' conversion. 0 in a
  // build without CUDA.
  static size_t PlanHostBytes(const CacheShape& shape, const SekvOptions& options, GpuTier tier,
                              GpuZoom zoom, int64_t positions);

  // True when the device zoom on `backend` reads the CPU tier where it lies, through the host's
  // page tables (cuda::DeviceReadsPageableMemory): no mirror then registers or copies it. Else
  // a mirror may read a pinned copy (cpu_tier_access()). False in a build without CUDA.
  static absl::StatusOr<bool> ReadsPageableCpuTier(const Backend& backend);

  // Registers `cache`'s CPU tier with `backend`'s device (CpuTierMapping), for Create's zoom
  // on the device. Any thread may call it: it makes the backend's device current first.
  static absl::StatusOr<std::unique_ptr<CpuTierMapping>> MapCpuTier(const Backend& backend,
                                                                    const SekvCache& cache);
  ~GpuSekv();

  // The tiers as this object holds them, counted as SekvCache::Memory counts the host's (rows
  // in use, not allocation slack), in the device tier's element size:
  //   anchors, summaries (with the per-head counts kept on the device), window, pinned: the
  //   device's rows; expanded_cache: the device's expansion rows (expand_budget per layer and
  //   KV head); cpu_bases: the CPU tier's bases and the host's LRU of rebuilt rows;
  //   full_kv: the CUDA backend's BF16 KV cache of the same positions.
  // So gpu_ratio() is the fraction of device memory the full cache would take.
  MemoryBreakdown Memory() const;

  // The device memory this object holds now: every buffer's allocation, slack included (what
  // Memory() leaves out). It stays put while the window grows within its capacity (the
  // cache's window, generated_reserve and window_slack rows): the attention's workspace is
  // sized for that at Create.
  size_t DeviceBytes() const;

  // The host memory this object holds beside the cache it mirrors: its pinned staging (q, k, v,
  // the tables, the rebuilt rows, the zoom's counts), the pinned copy of the CPU tier where
  // the device read neither the pageable bases nor a registration of them (kPinnedCopy), and
  // the buffer that converts the pins' uploads to BF16 (Create's own uploads free theirs).
  size_t HostBytes() const;

  // How the device zoom reads the CPU tier; with kPinnedCopy, registration_error() says why
  // the device refused to register it where it lies (OK when the bases are outside any arena).
  CpuTierAccess cpu_tier_access() const;
  absl::Status registration_error() const;

  // Decodes `token` at `position` through the hierarchy; next-token logits [vocab].
  absl::Status Step(int32_t token, int position, std::vector<float>* logits);
  // Step for several mirrors of one backend at once: mirrors[i] decodes tokens[i] at
  // positions[i], its logits into (*logits)[i]. One model step of batch rows
  // (Backend::DecodeMixed): the GEMMs read the weights once for every row, and each layer's
  // attention runs row by row through its own mirror, on the backend's stream.
  static absl::Status StepBatch(absl::Span<GpuSekv* const> mirrors,
                                absl::Span<const int32_t> tokens, absl::Span<const int> positions,
                                std::vector<std::vector<float>>* logits);
  // StepBatch in the same model step as `backend`'s own sequences (Backend::DecodeMixed):
  // seqs[i] decodes seq_tokens[i], sampled with draws[i] into (*next)[i], and the weights are
  // read once for both kinds of rows. Every mirror must be on `backend` (OnBackend).
  static absl::Status StepMixed(Backend& backend, absl::Span<Sequence* const> seqs,
                                absl::Span<const int32_t> seq_tokens,
                                absl::Span<const SampleDraw> draws, std::vector<int32_t>* next,
                                absl::Span<GpuSekv* const> mirrors,
                                absl::Span<const int32_t> tokens, absl::Span<const int> positions,
                                std::vector<std::vector<float>>* logits);
  // Whether this mirror was made on `backend` (its model runs there).
  bool OnBackend(const Backend& backend) const;

  // One layer's attention for device q [num_heads, head_dim], k, v [kv_dim] (k after RoPE)
  // into device out [num_heads, head_dim], on `stream` (a cuda::StreamHandle). What Step runs
  // inside the model; public for the parity tests.
  absl::Status Attend(int layer, const float* q, const float* k, const float* v, float* out,
                      void* stream);

  // Waits for `stream` and brings the host cache up to date with the device zoom's deferred
  // work (the window rows, the zoom counts). Step does it; a caller of Attend does it before
  // reading the host cache. Attend does it for its own layer when needed.
  absl::Status Settle(void* stream);

  class Impl;

 private:
  explicit GpuSekv(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_GPU_SEKV_H_
