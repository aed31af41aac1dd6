// GpuSekv's implementation (gpu_sekv.h), shared by its three files: gpu_sekv.cc (the public
// calls, planning and the CPU tier's mapping), gpu_sekv_mirror.cc (the device tier's set-up,
// growth and memory) and gpu_sekv_step.cc (a layer's decode step: resident softmax, gate,
// zoom-in and merge). Included only by them, in CUDA builds.
#ifndef SCD_COMMON_SEKV_GPU_SEKV_IMPL_H_
#define SCD_COMMON_SEKV_GPU_SEKV_IMPL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/runtime/cuda/backend_access.h"
#include "common/runtime/cuda/kernel_choices.h"
#include "common/runtime/cuda/op_profiling.h"
#include "common/sekv/gpu_sekv.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/op_profile.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::sekv {
namespace gpu_sekv_internal {

constexpr int kResidentSegments = 4;  // anchors | summaries | window | pins
constexpr int kTables = 4;            // segment tables per layer step (see Attend)

// `count` elements from pageable host memory (staged by the driver before the call returns).
template <typename T>
absl::Status Upload(cuda::DeviceBuffer* dst, const T* src, size_t count, const char* what,
                    cuda::StreamHandle s) {
  SCD_RETURN_IF_ERROR(dst->Reserve(std::max<size_t>(count, 1) * sizeof(T), what));
  if (count == 0) return absl::OkStatus();
  return cuda::CopyToDevice(dst->data(), src, count * sizeof(T), s);
}

// Per (KV head, span) on the device: each layer's base_lc (float) and remaining (int32); the
// step's step_lc (float) and step_skip (one byte), shared by the layers (they run one after
// another on the step's stream, with a host synchronisation in each).
constexpr size_t kLayerCountBytes = sizeof(float) + sizeof(int32_t);
constexpr size_t kStepCountBytes = sizeof(float) + 1;

// One layer's GPU tier. The K/V rows are of the tier's element type.
struct DeviceLayer {
  // The bases' pinned copy, where the device reads neither pageable memory nor the layer's
  // registrations (CpuTierMapping). Declared first, so destroyed last: after the device
  // buffers, whose freeing waits for the device (cudaFree), so no kernel reads it any more.
  std::unique_ptr<cuda::PinnedBuffer> arena;
  cuda::DeviceBuffer anchor_k, anchor_v, summary_k, summary_v, window_k, window_v, pin_k, pin_v;
  cuda::DeviceBuffer base_lc, remaining;      // [num_kv_heads, num_spans]
  cuda::DeviceBuffer p_q, p_k, gates;         // the layer's router
  cuda::DeviceBuffer expanded_k, expanded_v;  // [num_kv_heads, budget, head_dim]
  int window_capacity = 0;                    // rows
  // The device zoom: the CPU tier's SpanBasisRef table [num_kv_heads, num_spans], the gate
  // thresholds [num_kv_heads], the pinned flags [num_kv_heads, span tokens].
  cuda::DeviceBuffer bases, tau, pinned_flags;
};

constexpr int kZoomCounts = 4;  // SekvZoom's stats per KV head

// The pinned staging of a mirror (Init) of a cache of `shape` with `gs` (KV head, span) pairs
// and an expansion budget of `budget` rows per KV head, its device rows `elem` bytes each.
struct PinnedStaging {
  size_t qkv = 0, la = 0, tables = 0, edits = 0, rows = 0, counts = 0, append = 0;
  size_t total() const { return qkv + la + tables + edits + rows + counts + append; }
};
PinnedStaging StagingFor(const CacheShape& shape, size_t gs, int budget, size_t elem,
                         bool device_zoom);

}  // namespace gpu_sekv_internal

struct CpuTierMapping::Layers {
  std::vector<std::vector<std::unique_ptr<cuda::HostRegistration>>> registered;  // per layer
};

class GpuSekv::Impl : public RowAttention {
 public:
  Impl(Backend& backend, SekvCache& cache, GpuTier tier, GpuZoom zoom, int window_slack,
       const CpuTierMapping* mapping)
      : mapping_(mapping),
        backend_(backend),
        cache_(cache),
        shape_(CacheShape::FromConfig(backend.model().config)),
        type_(tier == GpuTier::kBf16 ? cuda::KvType::kBf16 : cuda::KvType::kF32),
        elem_(tier == GpuTier::kBf16 ? sizeof(cuda::Bf16) : sizeof(float)),
        device_zoom_(zoom == GpuZoom::kDevice),
        window_slack_(window_slack) {}

  absl::Status Init();
  absl::Status Attend(int l, const float* q, const float* k, const float* v, float* out,
                      void* s) override;
  absl::Status Settle(cuda::StreamHandle s);
  // Settle's work once the stream has been waited for.
  void Fold();
  MemoryBreakdown Memory() const;
  size_t DeviceBytes() const;
  size_t HostBytes() const;
  CpuTierAccess cpu_tier_access() const { return cpu_tier_access_; }
  absl::Status registration_error() const {
    return mapping_ != nullptr ? mapping_->error() : absl::OkStatus();
  }
  Backend& backend() { return backend_; }
  // The backend's op profile (cuda::OpClockOf): `op`'s interval goes to class `c`.
  absl::Status Mark(cuda::OpClass c, absl::Status op, cuda::StreamHandle s) {
    return clock_->Mark(c, std::move(op), s);
  }

 private:
  // Row data of the tier: `elements` K/V elements (F32 host values, converted for BF16) into
  // `dst`, reserved to at least `reserve` elements (0: exactly these).
  absl::Status UploadRows(cuda::DeviceBuffer* dst, const float* src, size_t elements,
                          const char* what, cuda::StreamHandle s, size_t reserve = 0);
  // Element `i` of a tier buffer, as a segment's or gate's pointer.
  const void* At(const cuda::DeviceBuffer& b, size_t i) const { return b.as<char>() + i * elem_; }
  void* At(cuda::DeviceBuffer& b, size_t i) const { return b.as<char>() + i * elem_; }
  // Table `t` of layer l's step (one pinned and one device region each, so that a layer's
  // tables are rewritten only after the step that read them has finished): anchors | summaries
  // (log counts lc, skip flags) | window of `window_rows` | pins (when `pins`), per KV head.
  cuda::AttentionSegment* HostTable(int l, int t) {
    return host_tables_.as<cuda::AttentionSegment>() +
           (l * gpu_sekv_internal::kTables + t) * TableSize();
  }
  cuda::AttentionSegment* DeviceTable(int l, int t) const {
    return segments_.as<cuda::AttentionSegment>() +
           (l * gpu_sekv_internal::kTables + t) * TableSize();
  }
  int TableSize() const { return shape_.num_kv_heads * gpu_sekv_internal::kResidentSegments; }
  absl::Status UploadResident(int l, int t, int window_rows, const float* lc, const uint8_t* skip,
                              bool pins, cuda::StreamHandle s);
  // The resident rows of a KV head at this step: anchors + summaries + window + pins.
  int ResidentRows(int l, int window_rows) const {
    const SpanStore& st = cache_.store(l);
    return st.num_anchors() + st.num_spans() + window_rows + cache_.options().pin_tokens;
  }
  absl::Status Reserve(int max_rows, cuda::StreamHandle s);
  // SekvAttention's workspace for steps of up to `max_rows` resident rows per KV head.
  int64_t WorkspaceFloats(int max_rows) const;
  absl::Status GrowWindow(int l, int rows, cuda::StreamHandle s);
  absl::Status UploadCounts(int l, cuda::StreamHandle s);
  // Init's steps: layer l's tier uploaded and its buffers reserved; the step's scratch for `gs`
  // (KV head, span) pairs; the device zoom's parameters, workspace, and view of the CPU tier.
  absl::Status InitLayer(int l, cuda::StreamHandle s);
  absl::Status ReserveStepBuffers(size_t gs);
  absl::Status InitDeviceZoom(const gpu_sekv_internal::PinnedStaging& pinned, cuda::StreamHandle s);
  // The device zoom's view of layer l's CPU tier, thresholds and pinned flags.
  absl::Status InitZoom(int l, bool in_place, cuda::StreamHandle s);
  // The registration among `registered` that holds x[0, n), or null.
  static const cuda::HostRegistration* RegistrationOf(
      const std::vector<std::unique_ptr<cuda::HostRegistration>>& registered, const float* x,
      size_t n);
  // The floats of layer l's bases no registration holds (0 in place); an error for a basis of
  // rank over kMaxBasisRank.
  absl::StatusOr<size_t> CpuTierFloatsToCopy(int l, bool in_place) const;
  // The expansion's segment table (3): fixed rows of expanded_k / expanded_v, whose count
  // SekvZoom writes at each step.
  absl::Status InitExpansionTable(int l, cuda::StreamHandle s);
  // Steps 3-6 of a layer on the device (after its pins); the token is in the device window.
  absl::Status ZoomOnDevice(int l, int rows, const float* q, float* out, cuda::StreamHandle s);
  // lse_ of the resident entries (table t, the base summary counts; pins when `pins`).
  absl::Status ResidentLse(int l, int t, int rows, const float* q, bool pins, cuda::StreamHandle s);
  // The zoom-in gate: alpha_ over the resident lse_ with pins (table 1).
  absl::Status Gate(int l, int rows, const float* q, cuda::StreamHandle s);
  // The resident part of the step's softmax (table 2, with the step's summary counts) into
  // out and lse_; then the expansion's (table 3) merged into it.
  absl::Status ResidentSoftmax(int l, int rows, const float* q, float* out, cuda::StreamHandle s);
  absl::Status MergeExpansion(int l, const float* q, float* out, cuda::StreamHandle s);

  // Attend's steps (gpu_sekv_step.cc). The step's q, k and v copied to the host (host_qkv_)
  // for the planning, and whether the host cache has the token yet.
  struct HostToken {
    float* q = nullptr;
    float* k = nullptr;
    float* v = nullptr;
    bool appended = false;
  };
  // 1. The token's k and v into layer l's device window, grown to `rows`.
  absl::Status JoinWindow(int l, int rows, const float* k, const float* v, cuda::StreamHandle s);
  // Waits for the stream, then appends the token to the host cache (once).
  absl::Status WaitAndAppend(int l, HostToken* token, cuda::StreamHandle s);
  // 2. The observation-window anchors, at the layer's first step, chosen on the host and
  // their rows uploaded.
  absl::Status PinAnchors(int l, int rows, const float* q, HostToken* token, cuda::StreamHandle s);
  // 3-4. With the zoom on the host: the gate, the host's selection (when the layer zooms) and
  // the step's summary counts on the device.
  absl::Status SelectOnHost(int l, int rows, const float* q, bool zoom, HostToken* token,
                            cuda::StreamHandle s);
  // 6. The rows the host rebuilt, uploaded as the expansion's table (table 3).
  absl::Status UploadExpandedRows(int l, cuda::StreamHandle s);

  // Where the device reads the CPU tier (the zoom on the device): the caller's mapping, or
  // own_mapping_. Declared first, so the registrations go after every device buffer.
  std::unique_ptr<CpuTierMapping> own_mapping_;
  const CpuTierMapping* mapping_ = nullptr;
  Backend& backend_;
  SekvCache& cache_;
  const CacheShape shape_;
  const cuda::KvType type_;          // the K/V rows on the device
  const size_t elem_;                // their element size
  const bool device_zoom_;           // GpuZoom::kDevice
  const int window_slack_;           // device window rows beyond the need when it (re)grows
  std::vector<cuda::Bf16> staging_;  // host conversion of pageable uploads (BF16 tier)
  int num_spans_ = 0, budget_ = 0, pins_ = 0, route_dim_ = 0;
  std::vector<gpu_sekv_internal::DeviceLayer> layers_;
  cuda::DeviceBuffer alpha_, step_lc_, step_skip_, lse_, lse_e_, out_e_, edits_, segments_,
      workspace_;
  cuda::PinnedBuffer host_qkv_, host_la_, host_tables_, host_edits_, host_rows_;
  // The device zoom: its parameters; the zoom counts (device, [num_kv_heads,
  // gpu_sekv_internal::kZoomCounts], and their last copy and what the host cache has of them); each
  // layer's token K/V waiting for the host window ([num_layers, 2, kv_dim]) and whether it waits;
  // whether a layer's last step may still be running (its pinned tables are rewritten only after a
  // wait).
  cuda::ZoomParams zoom_params_;
  cuda::DeviceBuffer zoom_counts_, zoom_ws_;
  cuda::PinnedBuffer host_counts_, host_append_;
  std::vector<int64_t> counts_seen_;
  bool counts_copied_ = false;
  int last_zoom_layer_ = -1;  // the last layer that zooms: its step copies the counts back
  std::vector<uint8_t> append_pending_, unsettled_;
  cuda::StreamHandle last_stream_ = nullptr;
  CpuTierAccess cpu_tier_access_ = CpuTierAccess::kNone;    // set by Init
  cuda::DecodeImpl decode_impl_ = cuda::DecodeImpl::kAuto;  // the backend's (Init)
  cuda::OpClock* clock_ = nullptr;                          // the backend's op profile (Init)
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_GPU_SEKV_IMPL_H_
