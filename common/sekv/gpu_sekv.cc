// See gpu_sekv.h.
#include "common/sekv/gpu_sekv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

#if SCD_HAVE_CUDA
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/op_profile.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "kernels/cuda/synthetic_backend.h"
#endif

namespace scd::sekv {

const char* CpuTierAccessName(CpuTierAccess a) {
  switch (a) {
    case CpuTierAccess::kNone:
      return "none";
    case CpuTierAccess::kPageable:
      return "pageable";
    case CpuTierAccess::kRegistered:
      return "registered";
    case CpuTierAccess::kPinnedCopy:
      return "pinned copy";
  }
  return "?";
}

#if !SCD_HAVE_CUDA

struct CpuTierMapping::Layers {};
CpuTierMapping::CpuTierMapping(const SekvCache& cache)
    : cache_(cache), layers_(std::make_unique<Layers>()) {}
CpuTierMapping::~CpuTierMapping() = default;

absl::StatusOr<std::unique_ptr<CpuTierMapping>> GpuSekv::MapCpuTier(const Backend&,
                                                                    const SekvCache&) {
  return absl::UnimplementedError("this build has no CUDA: the GPU SEKV path is not available");
}

class GpuSekv::Impl {};

GpuSekv::GpuSekv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuSekv::~GpuSekv() = default;

bool GpuSekv::Applies(const Backend&) { return false; }

TierOverhead GpuSekv::PlanOverhead(const CacheShape&, const SekvOptions&, GpuTier, GpuZoom) {
  return TierOverhead{};
}

absl::StatusOr<std::unique_ptr<GpuSekv>> GpuSekv::Create(Backend&, SekvCache&, GpuTier, GpuZoom,
                                                         int, const CpuTierMapping*) {
  return absl::UnimplementedError("this build has no CUDA: the GPU SEKV path is not available");
}

absl::StatusOr<bool> GpuSekv::ReadsPageableCpuTier(const Backend&) { return false; }

size_t GpuSekv::PlanHostBytes(const CacheShape&, const SekvOptions&, GpuTier, GpuZoom, int64_t) {
  return 0;
}

MemoryBreakdown GpuSekv::Memory() const { return {}; }

size_t GpuSekv::DeviceBytes() const { return 0; }

size_t GpuSekv::HostBytes() const { return 0; }

CpuTierAccess GpuSekv::cpu_tier_access() const { return CpuTierAccess::kNone; }

absl::Status GpuSekv::registration_error() const { return absl::OkStatus(); }

absl::Status GpuSekv::Step(int32_t, int, std::vector<float>*) {
  return absl::UnimplementedError("this build has no CUDA: the GPU SEKV path is not available");
}

absl::Status GpuSekv::StepBatch(absl::Span<GpuSekv* const>, absl::Span<const int32_t>,
                                absl::Span<const int>, std::vector<std::vector<float>>*) {
  return absl::UnimplementedError("this build has no CUDA: the GPU SEKV path is not available");
}

absl::Status GpuSekv::StepMixed(Backend&, absl::Span<Sequence* const>, absl::Span<const int32_t>,
                                absl::Span<const SampleDraw>, std::vector<int32_t>*,
                                absl::Span<GpuSekv* const>, absl::Span<const int32_t>,
                                absl::Span<const int>, std::vector<std::vector<float>>*) {
  return absl::UnimplementedError("this build has no CUDA: the GPU SEKV path is not available");
}

bool GpuSekv::OnBackend(const Backend&) const { return false; }

absl::Status GpuSekv::Attend(int, const float*, const float*, const float*, float*, void*) {
  return absl::UnimplementedError("this build has no CUDA: the GPU SEKV path is not available");
}

absl::Status GpuSekv::Settle(void*) {
  return absl::UnimplementedError("this build has no CUDA: the GPU SEKV path is not available");
}

#else

namespace {

using cuda::AttentionSegment;
using cuda::Bf16;
using cuda::DeviceBuffer;
using cuda::KvType;
using cuda::PinnedBuffer;
using cuda::StreamHandle;

constexpr int kResidentSegments = 4;  // anchors | summaries | window | pins
constexpr int kTables = 4;            // segment tables per layer step (see Attend)

// `count` elements from pageable host memory (staged by the driver before the call returns).
template <typename T>
absl::Status Upload(DeviceBuffer* dst, const T* src, size_t count, const char* what,
                    StreamHandle s) {
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
  std::unique_ptr<PinnedBuffer> arena;
  DeviceBuffer anchor_k, anchor_v, summary_k, summary_v, window_k, window_v, pin_k, pin_v;
  DeviceBuffer base_lc, remaining;                      // [num_kv_heads, num_spans]
  DeviceBuffer p_q, p_k, gates;                         // the layer's router
  DeviceBuffer expanded_k, expanded_v;                  // [num_kv_heads, budget, head_dim]
  int window_capacity = 0;                              // rows
  // The device zoom: the CPU tier's SpanBasisRef table [num_kv_heads, num_spans], the gate
  // thresholds [num_kv_heads], the pinned flags [num_kv_heads, span tokens].
  DeviceBuffer bases, tau, pinned_flags;
};

constexpr int kZoomCounts = 4;  // SekvZoom's stats per KV head

// The pinned staging of a mirror (Init) of a cache of `shape` with `gs` (KV head, span) pairs
// and an expansion budget of `budget` rows per KV head, its device rows `elem` bytes each.
struct PinnedStaging {
  size_t qkv = 0, la = 0, tables = 0, edits = 0, rows = 0, counts = 0, append = 0;
  size_t total() const { return qkv + la + tables + edits + rows + counts + append; }
};
PinnedStaging StagingFor(const CacheShape& shape, size_t gs, int budget, size_t elem,
                         bool device_zoom) {
  const size_t kvd = shape.kv_dim(), groups = shape.num_kv_heads;
  PinnedStaging p;
  p.qkv = sizeof(float) * (shape.q_dim() + 2 * kvd);
  p.la = sizeof(float) * (shape.num_heads + gs);
  p.tables = sizeof(AttentionSegment) * kTables * groups * kResidentSegments * shape.num_layers;
  p.edits = sizeof(int32_t) * 2 * std::max<size_t>(gs, 1);
  p.rows = elem * 2 * groups * std::max(budget, 1) * static_cast<size_t>(shape.head_dim);
  if (device_zoom) {
    p.counts = sizeof(int64_t) * groups * kZoomCounts;
    p.append = sizeof(float) * 2 * kvd * shape.num_layers;
  }
  return p;
}

}  // namespace

struct CpuTierMapping::Layers {
  std::vector<std::vector<std::unique_ptr<cuda::HostRegistration>>> registered;  // per layer
};

CpuTierMapping::CpuTierMapping(const SekvCache& cache)
    : cache_(cache), layers_(std::make_unique<Layers>()) {
  layers_->registered.resize(cache.shape().num_layers);  // none yet
}
CpuTierMapping::~CpuTierMapping() = default;

absl::StatusOr<std::unique_ptr<CpuTierMapping>> GpuSekv::MapCpuTier(const Backend& backend,
                                                                    const SekvCache& cache) {
  SCD_ASSIGN_OR_RETURN(const int device, cuda::CudaBackendDevice(backend));
  SCD_RETURN_IF_ERROR(cuda::SetDevice(device));
  auto mapping = std::make_unique<CpuTierMapping>(cache);
  const int layers = cache.shape().num_layers;
  auto& registered = mapping->layers().registered;
  if (cuda::DeviceReadsPageableMemory()) return mapping;
  for (int l = 0; l < layers; ++l) {
    if (!cache.zooms(l)) continue;
    for (const BasisArena::Block& b : cache.store(l).basis_blocks()) {
      absl::StatusOr<std::unique_ptr<cuda::HostRegistration>> r =
          cuda::HostRegistration::Create(b.data, sizeof(float) * b.floats, "sekv CPU tier");
      if (!r.ok()) {  // this layer and the rest are copied instead
        registered[l].clear();
        mapping->set_error(r.status());
        return mapping;
      }
      registered[l].push_back(*std::move(r));
    }
  }
  return mapping;
}

class GpuSekv::Impl : public RowAttention {
 public:
  Impl(Backend& backend, SekvCache& cache, GpuTier tier, GpuZoom zoom, int window_slack,
       const CpuTierMapping* mapping)
      : mapping_(mapping),
        backend_(backend),
        cache_(cache),
        shape_(CacheShape::FromConfig(backend.model().config)),
        type_(tier == GpuTier::kBf16 ? KvType::kBf16 : KvType::kF32),
        elem_(tier == GpuTier::kBf16 ? sizeof(Bf16) : sizeof(float)),
        device_zoom_(zoom == GpuZoom::kDevice),
        window_slack_(window_slack) {}

  absl::Status Init();
  absl::Status Attend(int l, const float* q, const float* k, const float* v, float* out,
                      void* s) override;
  absl::Status Settle(StreamHandle s);
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
  absl::Status Mark(cuda::OpClass c, absl::Status op, StreamHandle s) {
    return clock_->Mark(c, std::move(op), s);
  }

 private:
  // Row data of the tier: `elements` K/V elements (F32 host values, converted for BF16) into
  // `dst`, reserved to at least `reserve` elements (0: exactly these).
  absl::Status UploadRows(DeviceBuffer* dst, const float* src, size_t elements, const char* what,
                          StreamHandle s, size_t reserve = 0);
  // Element `i` of a tier buffer, as a segment's or gate's pointer.
  const void* At(const DeviceBuffer& b, size_t i) const { return b.as<char>() + i * elem_; }
  void* At(DeviceBuffer& b, size_t i) const { return b.as<char>() + i * elem_; }
  // Table `t` of layer l's step (one pinned and one device region each, so that a layer's
  // tables are rewritten only after the step that read them has finished): anchors | summaries
  // (log counts lc, skip flags) | window of `window_rows` | pins (when `pins`), per KV head.
  AttentionSegment* HostTable(int l, int t) {
    return host_tables_.as<AttentionSegment>() + (l * kTables + t) * TableSize();
  }
  AttentionSegment* DeviceTable(int l, int t) const {
    return segments_.as<AttentionSegment>() + (l * kTables + t) * TableSize();
  }
  int TableSize() const { return shape_.num_kv_heads * kResidentSegments; }
  absl::Status UploadResident(int l, int t, int window_rows, const float* lc, const uint8_t* skip,
                              bool pins, StreamHandle s);
  // The resident rows of a KV head at this step: anchors + summaries + window + pins.
  int ResidentRows(int l, int window_rows) const {
    const SpanStore& st = cache_.store(l);
    return st.num_anchors() + st.num_spans() + window_rows + cache_.options().pin_tokens;
  }
  absl::Status Reserve(int max_rows, StreamHandle s);
  // SekvAttention's workspace for steps of up to `max_rows` resident rows per KV head.
  int64_t WorkspaceFloats(int max_rows) const;
  absl::Status GrowWindow(int l, int rows, StreamHandle s);
  absl::Status UploadCounts(int l, StreamHandle s);
  // The device zoom's view of layer l's CPU tier, thresholds and pinned flags.
  absl::Status InitZoom(int l, bool in_place, StreamHandle s);
  // Steps 3-6 of a layer on the device (after its pins); the token is in the device window.
  absl::Status ZoomOnDevice(int l, int rows, const float* q, float* out, StreamHandle s);
  // lse_ of the resident entries (table t, the base summary counts; pins when `pins`).
  absl::Status ResidentLse(int l, int t, int rows, const float* q, bool pins, StreamHandle s);
  // The zoom-in gate: alpha_ over the resident lse_ with pins (table 1).
  absl::Status Gate(int l, int rows, const float* q, StreamHandle s);
  // The resident part of the step's softmax (table 2, with the step's summary counts) into
  // out and lse_; then the expansion's (table 3) merged into it.
  absl::Status ResidentSoftmax(int l, int rows, const float* q, float* out, StreamHandle s);
  absl::Status MergeExpansion(int l, const float* q, float* out, StreamHandle s);

  // Where the device reads the CPU tier (the zoom on the device): the caller's mapping, or
  // own_mapping_. Declared first, so the registrations go after every device buffer.
  std::unique_ptr<CpuTierMapping> own_mapping_;
  const CpuTierMapping* mapping_ = nullptr;
  Backend& backend_;
  SekvCache& cache_;
  const CacheShape shape_;
  const KvType type_;          // the K/V rows on the device
  const size_t elem_;          // their element size
  const bool device_zoom_;     // GpuZoom::kDevice
  const int window_slack_;     // device window rows beyond the need when it (re)grows
  std::vector<Bf16> staging_;  // host conversion of pageable uploads (BF16 tier)
  int num_spans_ = 0, budget_ = 0, pins_ = 0, route_dim_ = 0;
  std::vector<DeviceLayer> layers_;
  DeviceBuffer alpha_, step_lc_, step_skip_, lse_, lse_e_, out_e_, edits_, segments_, workspace_;
  PinnedBuffer host_qkv_, host_la_, host_tables_, host_edits_, host_rows_;
  // The device zoom: its parameters; the zoom counts (device, [num_kv_heads, kZoomCounts], and
  // their last copy and what the host cache has of them); each layer's token K/V waiting for
  // the host window ([num_layers, 2, kv_dim]) and whether it waits; whether a layer's last
  // step may still be running (its pinned tables are rewritten only after a wait).
  cuda::ZoomParams zoom_params_;
  DeviceBuffer zoom_counts_, zoom_ws_;
  PinnedBuffer host_counts_, host_append_;
  std::vector<int64_t> counts_seen_;
  bool counts_copied_ = false;
  int last_zoom_layer_ = -1;  // the last layer that zooms: its step copies the counts back
  std::vector<uint8_t> append_pending_, unsettled_;
  StreamHandle last_stream_ = nullptr;
  CpuTierAccess cpu_tier_access_ = CpuTierAccess::kNone;  // set by Init
  cuda::DecodeImpl decode_impl_ = cuda::DecodeImpl::kAuto;  // the backend's (Init)
  cuda::OpClock* clock_ = nullptr;                          // the backend's op profile (Init)
};

absl::Status GpuSekv::Impl::UploadRows(DeviceBuffer* dst, const float* src, size_t elements,
                                       const char* what, StreamHandle s, size_t reserve) {
  SCD_RETURN_IF_ERROR(dst->Reserve(std::max<size_t>({elements, reserve, 1}) * elem_, what));
  if (elements == 0) return absl::OkStatus();
  if (type_ == KvType::kF32) {
    return cuda::CopyToDevice(dst->data(), src, elements * sizeof(float), s);
  }
  // Pageable memory: the copy is staged before the call returns, so staging_ may be reused.
  staging_.resize(elements);
  for (size_t i = 0; i < elements; ++i) staging_[i] = cuda::FloatToBf16(src[i]);
  return cuda::CopyToDevice(dst->data(), staging_.data(), elements * sizeof(Bf16), s);
}

absl::Status GpuSekv::Impl::Init() {
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), qd = shape_.q_dim();
  const int heads = shape_.num_heads, groups = shape_.num_kv_heads;
  const SekvOptions& o = cache_.options();
  const ZoomRouter& router = cache_.router();
  num_spans_ = static_cast<int>(cache_.segmentation().spans.size());
  budget_ = cache_.zooms(0) ? o.expand_budget : 0;
  pins_ = o.pin_tokens;
  route_dim_ = router.route_dim();
  SCD_ASSIGN_OR_RETURN(const cuda::KernelChoices kernels, cuda::KernelChoicesOf(backend_));
  decode_impl_ = kernels.decode_attention;  // the split attention the backend's decode runs
  SCD_ASSIGN_OR_RETURN(clock_, cuda::OpClockOf(backend_));
  const size_t gs = static_cast<size_t>(groups) * num_spans_;
  const StreamHandle s = nullptr;  // one-off uploads, waited for below
  layers_.resize(shape_.num_layers);
  for (int l = 0; l < shape_.num_layers; ++l) {
    const SpanStore& st = cache_.store(l);
    DeviceLayer& d = layers_[l];
    const size_t na = st.num_anchors(), ns = st.num_spans(), nw = st.window_rows();
    SCD_RETURN_IF_ERROR(UploadRows(&d.anchor_k, st.anchor_k(), na * kvd, "sekv anchors", s));
    SCD_RETURN_IF_ERROR(UploadRows(&d.anchor_v, st.anchor_v(), na * kvd, "sekv anchors", s));
    SCD_RETURN_IF_ERROR(UploadRows(&d.summary_k, st.summary_k(), ns * kvd, "sekv summaries", s));
    SCD_RETURN_IF_ERROR(UploadRows(&d.summary_v, st.summary_v(), ns * kvd, "sekv summaries", s));
    d.window_capacity = static_cast<int>(nw) + o.generated_reserve + window_slack_;
    const size_t window = static_cast<size_t>(d.window_capacity) * kvd;
    SCD_RETURN_IF_ERROR(UploadRows(&d.window_k, st.window_k(), nw * kvd, "sekv window", s, window));
    SCD_RETURN_IF_ERROR(UploadRows(&d.window_v, st.window_v(), nw * kvd, "sekv window", s, window));
    const size_t pin_elements = static_cast<size_t>(groups) * std::max(pins_, 1) * hd;
    SCD_RETURN_IF_ERROR(d.pin_k.Reserve(elem_ * pin_elements, "sekv pins"));
    SCD_RETURN_IF_ERROR(d.pin_v.Reserve(elem_ * pin_elements, "sekv pins"));
    SCD_RETURN_IF_ERROR(UploadCounts(l, s));
    const size_t proj = static_cast<size_t>(groups) * route_dim_ * hd;
    SCD_RETURN_IF_ERROR(Upload(&d.p_q, router.p_q(l, 0), proj, "sekv router", s));
    SCD_RETURN_IF_ERROR(Upload(&d.p_k, router.p_k(l, 0), proj, "sekv router", s));
    std::vector<cuda::RouterGateParams> gates(groups);
    for (int g = 0; g < groups; ++g) {
      const RouterGate& gt = router.gate(l, g);
      gates[g] = {gt.w_size, gt.w_share, gt.bias, 0.0f};
    }
    SCD_RETURN_IF_ERROR(Upload(&d.gates, gates.data(), gates.size(), "sekv router", s));
    const size_t rows = elem_ * groups * std::max(budget_, 1) * hd;
    SCD_RETURN_IF_ERROR(d.expanded_k.Reserve(rows, "sekv expansion"));
    SCD_RETURN_IF_ERROR(d.expanded_v.Reserve(rows, "sekv expansion"));
  }
  // The workspace of every step the device window holds without growing (the splits are not
  // monotonic in the rows, so the most over them), so that DeviceBytes() stays put meanwhile.
  int64_t workspace = 0;
  for (int l = 0; l < shape_.num_layers; ++l) {
    const int most = ResidentRows(l, layers_[l].window_capacity);
    for (int rows = ResidentRows(l, cache_.store(l).window_rows()); rows <= most; ++rows) {
      workspace = std::max(workspace, WorkspaceFloats(rows));
    }
  }
  SCD_RETURN_IF_ERROR(
      workspace_.Reserve(sizeof(float) * static_cast<size_t>(workspace), "sekv workspace"));
  SCD_RETURN_IF_ERROR(alpha_.Reserve(sizeof(float) * std::max<size_t>(gs, 1), "sekv gate"));
  SCD_RETURN_IF_ERROR(step_lc_.Reserve(sizeof(float) * std::max<size_t>(gs, 1), "sekv counts"));
  SCD_RETURN_IF_ERROR(step_skip_.Reserve(std::max<size_t>(gs, 1), "sekv counts"));
  SCD_RETURN_IF_ERROR(lse_.Reserve(sizeof(float) * heads, "sekv lse"));
  SCD_RETURN_IF_ERROR(lse_e_.Reserve(sizeof(float) * heads, "sekv lse"));
  SCD_RETURN_IF_ERROR(out_e_.Reserve(sizeof(float) * qd, "sekv expanded attention"));
  SCD_RETURN_IF_ERROR(edits_.Reserve(sizeof(int32_t) * 2 * std::max<size_t>(gs, 1), "sekv edits"));
  const size_t tables = static_cast<size_t>(kTables) * TableSize() * shape_.num_layers;
  SCD_RETURN_IF_ERROR(segments_.Reserve(sizeof(AttentionSegment) * tables, "sekv segments"));
  const PinnedStaging pinned = StagingFor(shape_, gs, budget_, elem_, device_zoom_);
  SCD_RETURN_IF_ERROR(host_qkv_.Reserve(pinned.qkv));
  SCD_RETURN_IF_ERROR(host_la_.Reserve(pinned.la));
  SCD_RETURN_IF_ERROR(host_tables_.Reserve(pinned.tables));
  SCD_RETURN_IF_ERROR(host_edits_.Reserve(pinned.edits));
  SCD_RETURN_IF_ERROR(host_rows_.Reserve(pinned.rows));
  if (device_zoom_) {
    const bool by_token = o.resolution == ZoomResolution::kToken;
    zoom_params_.budget = budget_;
    zoom_params_.by_token = by_token ? 1 : 0;
    zoom_params_.candidate_budget =
        by_token ? static_cast<int>(std::lround(o.candidate_factor * budget_)) : budget_;
    if (zoom_params_.candidate_budget > cuda::kMaxZoomCandidates) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the GPU SEKV zoom takes at most ", cuda::kMaxZoomCandidates,
          " candidate tokens per KV head; this cache has ", zoom_params_.candidate_budget,
          " (expand_budget × candidate_factor): lower them, or zoom on the host"));
    }
    const int64_t ws = cuda::SekvZoomWorkspaceBytes(groups, zoom_params_.candidate_budget);
    SCD_RETURN_IF_ERROR(
        zoom_ws_.Reserve(static_cast<size_t>(std::max<int64_t>(ws, 1)), "sekv zoom workspace"));
    if (mapping_ == nullptr) {
      SCD_ASSIGN_OR_RETURN(own_mapping_, GpuSekv::MapCpuTier(backend_, cache_));
      mapping_ = own_mapping_.get();
    } else if (&mapping_->cache() != &cache_) {
      return absl::InvalidArgumentError("GpuSekv: the CPU tier mapping is of another cache");
    }
    const bool in_place = cuda::DeviceReadsPageableMemory();
    bool zooms = false, registered = false, copied = false;
    for (int l = 0; l < shape_.num_layers; ++l) {
      SCD_RETURN_IF_ERROR(InitZoom(l, in_place, s));
      if (!cache_.zooms(l)) continue;
      zooms = true;
      registered = registered || !mapping_->layers().registered[l].empty();
      copied = copied || layers_[l].arena != nullptr;
    }
    cpu_tier_access_ = copied              ? CpuTierAccess::kPinnedCopy
                       : registered        ? CpuTierAccess::kRegistered
                       : in_place && zooms ? CpuTierAccess::kPageable
                                           : CpuTierAccess::kNone;
    const size_t counts = static_cast<size_t>(groups) * kZoomCounts;
    SCD_RETURN_IF_ERROR(zoom_counts_.Reserve(sizeof(int64_t) * counts, "sekv zoom counts"));
    SCD_RETURN_IF_ERROR(cuda::SetDeviceBytes(zoom_counts_.data(), 0, zoom_counts_.size(), s));
    SCD_RETURN_IF_ERROR(host_counts_.Reserve(pinned.counts));
    counts_seen_.assign(counts, 0);
    SCD_RETURN_IF_ERROR(host_append_.Reserve(pinned.append));
    append_pending_.assign(shape_.num_layers, 0);
    unsettled_.assign(shape_.num_layers, 0);
  }
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(s));
  // The uploads above were staged before their calls returned: the conversion buffer (as large
  // as a layer's largest tier) goes now; the pins' uploads at the first step take little.
  std::vector<Bf16>().swap(staging_);
  return absl::OkStatus();
}

absl::Status GpuSekv::Impl::InitZoom(int l, bool in_place, StreamHandle s) {
  DeviceLayer& d = layers_[l];
  const SpanStore& st = cache_.store(l);
  const int groups = shape_.num_kv_heads, ns = st.num_spans();
  if (!cache_.zooms(l)) return absl::OkStatus();
  if (!st.has_cpu_tier()) {
    return absl::InvalidArgumentError(absl::StrCat("GpuSekv: layer ", l, " has no CPU tier"));
  }
  // The bases in place when the device reads pageable memory. Else where the mapping's
  // registrations of the store's arena hold them (page-locked and mapped, no copy); what no
  // registration holds is copied to pinned memory.
  const auto& registered = mapping_->layers().registered[l];
  auto registration = [&](const float* x, size_t n) -> const cuda::HostRegistration* {
    for (const auto& r : registered) {
      if (r->Contains(x, sizeof(float) * n)) return r.get();
    }
    return nullptr;
  };
  size_t floats = 0;  // to copy
  for (int g = 0; g < groups; ++g) {
    for (int j = 0; j < ns; ++j) {
      for (const LowRankBasis* b : {&st.key_basis(j, g), &st.value_basis(j, g)}) {
        if (b->rank > cuda::kMaxBasisRank) {
          return absl::InvalidArgumentError(
              absl::StrCat("the GPU SEKV zoom takes CPU-tier bases of rank at most ",
                           cuda::kMaxBasisRank, "; layer ", l, " has one of rank ", b->rank,
                           " (lower sekv.r_max, or zoom on the host)"));
        }
        if (in_place) continue;
        if (registration(b->us, b->us_size()) == nullptr) floats += b->us_size();
        if (registration(b->vt, b->vt_size()) == nullptr) floats += b->vt_size();
      }
    }
  }
  float* arena = nullptr;
  if (floats > 0) {
    d.arena = std::make_unique<PinnedBuffer>();
    SCD_RETURN_IF_ERROR(d.arena->Reserve(sizeof(float) * floats));
    arena = d.arena->as<float>();
  }
  auto place = [&](const float* x, size_t n) -> const float* {
    if (in_place || n == 0) return x;
    if (const cuda::HostRegistration* r = registration(x, n)) {
      return static_cast<const float*>(r->DevicePointer(x));
    }
    std::memcpy(arena, x, sizeof(float) * n);
    const float* at = arena;
    arena += n;
    return at;
  };
  const int64_t tokens = cache_.span_token_offset(ns);
  std::vector<cuda::SpanBasisRef> refs(static_cast<size_t>(groups) * ns);
  std::vector<float> tau(groups);
  for (int g = 0; g < groups; ++g) {
    for (int j = 0; j < ns; ++j) {
      const LowRankBasis& kb = st.key_basis(j, g);
      const LowRankBasis& vb = st.value_basis(j, g);
      cuda::SpanBasisRef& r = refs[static_cast<size_t>(g) * ns + j];
      r.us_k = place(kb.us, kb.us_size());
      r.vt_k = place(kb.vt, kb.vt_size());
      r.us_v = place(vb.us, vb.us_size());
      r.vt_v = place(vb.vt, vb.vt_size());
      r.pinned = pins_ > 0 ? g * tokens + cache_.span_token_offset(j) : -1;
      r.length = st.span_length(j);
      r.rank_k = kb.rank;
      r.rank_v = vb.rank;
    }
    const float override_tau = cache_.options().tau_override;
    tau[g] = override_tau >= 0 ? override_tau : cache_.router().gate(l, g).tau;
  }
  SCD_RETURN_IF_ERROR(Upload(&d.bases, refs.data(), refs.size(), "sekv zoom bases", s));
  SCD_RETURN_IF_ERROR(Upload(&d.tau, tau.data(), tau.size(), "sekv zoom gates", s));
  // The expansion's segment table (3): fixed rows of expanded_k / expanded_v, whose count
  // SekvZoom writes at each step.
  AttentionSegment* table = HostTable(l, 3);
  const int hd = shape_.head_dim;
  for (int g = 0; g < groups; ++g) {
    const size_t off = static_cast<size_t>(g) * budget_ * hd;
    table[g * kResidentSegments] = {
        At(d.expanded_k, off), At(d.expanded_v, off), nullptr, nullptr, 0, hd, type_, 0};
    for (int j = 1; j < kResidentSegments; ++j) table[g * kResidentSegments + j] = {};
  }
  SCD_RETURN_IF_ERROR(
      cuda::CopyToDevice(DeviceTable(l, 3), table, sizeof(AttentionSegment) * TableSize(), s));
  last_zoom_layer_ = l;
  if (pins_ > 0) {
    SCD_RETURN_IF_ERROR(d.pinned_flags.Reserve(std::max<size_t>(groups * tokens, 1), "sekv pins"));
    SCD_RETURN_IF_ERROR(cuda::SetDeviceBytes(d.pinned_flags.data(), 0, d.pinned_flags.size(), s));
  }
  return absl::OkStatus();
}

absl::Status GpuSekv::Impl::Settle(StreamHandle s) {
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(s));
  Fold();
  return absl::OkStatus();
}

void GpuSekv::Impl::Fold() {
  if (!device_zoom_) return;
  const int kvd = shape_.kv_dim();
  std::fill(unsettled_.begin(), unsettled_.end(), 0);
  for (int l = 0; l < shape_.num_layers; ++l) {
    if (!append_pending_[l]) continue;
    const float* slot = host_append_.as<float>() + static_cast<size_t>(l) * 2 * kvd;
    cache_.ExternalAppend(l, slot, slot + kvd);
    append_pending_[l] = 0;
  }
  if (counts_copied_) {
    const int64_t* now = host_counts_.as<int64_t>();
    ZoomStats z;
    for (int g = 0; g < shape_.num_kv_heads; ++g) {
      const size_t at = static_cast<size_t>(g) * kZoomCounts;
      z.steps += now[at] - counts_seen_[at];
      z.expanded_spans += now[at + 1] - counts_seen_[at + 1];
      z.expanded_tokens += now[at + 2] - counts_seen_[at + 2];
      z.candidate_tokens += now[at + 3] - counts_seen_[at + 3];
    }
    counts_seen_.assign(now, now + counts_seen_.size());
    cache_.AddZoomStats(z);
    counts_copied_ = false;
  }
}

// The layer's summary counts (base log counts and remaining tokens), after the pins.
absl::Status GpuSekv::Impl::UploadCounts(int l, StreamHandle s) {
  DeviceLayer& d = layers_[l];
  const size_t gs = static_cast<size_t>(shape_.num_kv_heads) * num_spans_;
  if (gs == 0) return absl::OkStatus();
  static_assert(sizeof(int) == sizeof(int32_t));
  SCD_RETURN_IF_ERROR(Upload(&d.base_lc, cache_.summary_log_count(l, 0), gs, "sekv counts", s));
  return Upload(&d.remaining, cache_.summary_remaining(l, 0), gs, "sekv counts", s);
}

int64_t GpuSekv::Impl::WorkspaceFloats(int max_rows) const {
  // The split of SekvAttention (so its workspace) is not monotonic in the rows: size for
  // both calls of the step, the resident rows and the expansion's.
  return std::max(cuda::SekvAttentionWorkspaceFloats(shape_.num_heads, shape_.head_dim, max_rows),
                  cuda::SekvAttentionWorkspaceFloats(shape_.num_heads, shape_.head_dim, budget_));
}

absl::Status GpuSekv::Impl::Reserve(int max_rows, StreamHandle s) {
  const int64_t floats = WorkspaceFloats(max_rows);
  if (sizeof(float) * static_cast<size_t>(floats) <= workspace_.size()) return absl::OkStatus();
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(s));  // the old workspace may be in use
  return workspace_.Reserve(sizeof(float) * static_cast<size_t>(floats) * 2, "sekv workspace");
}

absl::Status GpuSekv::Impl::GrowWindow(int l, int rows, StreamHandle s) {
  DeviceLayer& d = layers_[l];
  if (rows <= d.window_capacity) return absl::OkStatus();
  const size_t kvd = shape_.kv_dim();
  const int capacity = 2 * rows + window_slack_;
  SCD_ASSIGN_OR_RETURN(DeviceBuffer k,
                       DeviceBuffer::Allocate(elem_ * capacity * kvd, "sekv window"));
  SCD_ASSIGN_OR_RETURN(DeviceBuffer v,
                       DeviceBuffer::Allocate(elem_ * capacity * kvd, "sekv window"));
  const size_t used = elem_ * d.window_capacity * kvd;
  SCD_RETURN_IF_ERROR(cuda::CopyOnDevice(k.data(), d.window_k.data(), used, s));
  SCD_RETURN_IF_ERROR(cuda::CopyOnDevice(v.data(), d.window_v.data(), used, s));
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(s));  // before the old buffers are freed
  d.window_k = std::move(k);
  d.window_v = std::move(v);
  d.window_capacity = capacity;
  return absl::OkStatus();
}

absl::Status GpuSekv::Impl::UploadResident(int l, int t, int window_rows, const float* lc,
                                           const uint8_t* skip, bool pins, StreamHandle s) {
  const SpanStore& st = cache_.store(l);
  const DeviceLayer& d = layers_[l];
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), ns = st.num_spans();
  AttentionSegment* table = HostTable(l, t);
  for (int g = 0; g < shape_.num_kv_heads; ++g) {
    AttentionSegment* seg = table + g * kResidentSegments;
    const size_t col = static_cast<size_t>(g) * hd;
    seg[0] = {At(d.anchor_k, col),
              At(d.anchor_v, col),
              nullptr,
              nullptr,
              st.num_anchors(),
              kvd,
              type_,
              0};
    seg[1] = {At(d.summary_k, col),
              At(d.summary_v, col),
              ns > 0 ? lc + static_cast<size_t>(g) * ns : nullptr,
              ns > 0 && skip != nullptr ? skip + static_cast<size_t>(g) * ns : nullptr,
              ns,
              kvd,
              type_,
              0};
    seg[2] = {
        At(d.window_k, col), At(d.window_v, col), nullptr, nullptr, window_rows, kvd, type_, 0};
    seg[3] = AttentionSegment{};
    const int pr = pins ? cache_.pin_rows(l, g) : 0;
    if (pr > 0) {
      const size_t off = static_cast<size_t>(g) * pins_ * hd;
      seg[3] = {At(d.pin_k, off), At(d.pin_v, off), nullptr, nullptr, pr, hd, type_, 0};
    }
  }
  return cuda::CopyToDevice(DeviceTable(l, t), table, sizeof(AttentionSegment) * TableSize(), s);
}

absl::Status GpuSekv::Impl::Attend(int l, const float* q, const float* k, const float* v,
                                   float* out, StreamHandle s) {
  if (l < 0 || l >= shape_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("GpuSekv: no layer ", l));
  }
  // The device zoom's last step of this layer must be done (its tables are rewritten below)
  // and have reached the host window first.
  if (device_zoom_ && unsettled_[l]) SCD_RETURN_IF_ERROR(Settle(last_stream_));
  last_stream_ = s;
  const SpanStore& st = cache_.store(l);
  DeviceLayer& d = layers_[l];
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), qd = shape_.q_dim();
  const int heads = shape_.num_heads, groups = shape_.num_kv_heads, ns = st.num_spans();
  const int gs = groups * ns;
  const int rows = st.window_rows() + 1;  // the window with this token

  // 1. The token joins the device window; q, k, v go to the host for the planning.
  SCD_RETURN_IF_ERROR(GrowWindow(l, rows, s));
  SCD_RETURN_IF_ERROR(Reserve(ResidentRows(l, rows), s));
  const size_t at = static_cast<size_t>(rows - 1) * kvd;
  if (type_ == KvType::kF32) {
    SCD_RETURN_IF_ERROR(cuda::CopyOnDevice(At(d.window_k, at), k, sizeof(float) * kvd, s));
    SCD_RETURN_IF_ERROR(cuda::CopyOnDevice(At(d.window_v, at), v, sizeof(float) * kvd, s));
  } else {
    SCD_RETURN_IF_ERROR(cuda::F32ToBf16(k, static_cast<Bf16*>(At(d.window_k, at)), kvd, s));
    SCD_RETURN_IF_ERROR(cuda::F32ToBf16(v, static_cast<Bf16*>(At(d.window_v, at)), kvd, s));
  }
  if (device_zoom_ && cache_.pins_done(l)) {
    // The host window gets the token at Settle; nothing else comes back.
    float* slot = host_append_.as<float>() + static_cast<size_t>(l) * 2 * kvd;
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(slot, k, sizeof(float) * kvd, s));
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(slot + kvd, v, sizeof(float) * kvd, s));
    append_pending_[l] = 1;
    return ZoomOnDevice(l, rows, q, out, s);
  }
  float* hq = host_qkv_.as<float>();
  float* hk = hq + qd;
  float* hv = hk + kvd;
  SCD_RETURN_IF_ERROR(cuda::CopyToHost(hq, q, sizeof(float) * qd, s));
  SCD_RETURN_IF_ERROR(cuda::CopyToHost(hk, k, sizeof(float) * kvd, s));
  SCD_RETURN_IF_ERROR(cuda::CopyToHost(hv, v, sizeof(float) * kvd, s));
  float* lse_host = host_la_.as<float>();
  float* alpha_host = lse_host + heads;
  bool appended = false;
  auto wait_and_append = [&]() -> absl::Status {
    SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(s));
    if (!appended) cache_.ExternalAppend(l, hk, hv);
    appended = true;
    return absl::OkStatus();
  };

  // 2. The observation-window anchors, at the layer's first step.
  if (!cache_.pins_done(l)) {
    SCD_RETURN_IF_ERROR(ResidentLse(l, 0, rows, q, /*pins=*/false, s));
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(lse_host, lse_.data(), sizeof(float) * heads, s));
    SCD_RETURN_IF_ERROR(wait_and_append());
    SCD_RETURN_IF_ERROR(cache_.ExternalPin(l, hq, absl::MakeConstSpan(lse_host, heads)));
    if (pins_ > 0) {
      const size_t pin_elements = static_cast<size_t>(groups) * pins_ * hd;
      SCD_RETURN_IF_ERROR(UploadRows(&d.pin_k, cache_.pin_k(l), pin_elements, "sekv pins", s));
      SCD_RETURN_IF_ERROR(UploadRows(&d.pin_v, cache_.pin_v(l), pin_elements, "sekv pins", s));
      SCD_RETURN_IF_ERROR(UploadCounts(l, s));
      if (device_zoom_ && cache_.zooms(l)) {  // the device zoom skips the pinned tokens
        const size_t flags = static_cast<size_t>(groups) * cache_.span_token_offset(ns);
        SCD_RETURN_IF_ERROR(Upload(&d.pinned_flags, cache_.pinned_flags(l), flags, "sekv pins", s));
      }
    }
  }
  if (device_zoom_) {  // the layer's first step: its pins are chosen, the token appended
    if (!appended) SCD_RETURN_IF_ERROR(wait_and_append());
    return ZoomOnDevice(l, rows, q, out, s);
  }

  // 3-4. Gate, selection, the step's summary counts.
  const bool zoom = cache_.zooms(l);
  int num_edits = 0;
  SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kAttention, absl::OkStatus(), s));  // as the device path
  if (zoom) {
    SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kSekvGate, Gate(l, rows, q, s), s));
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(lse_host, lse_.data(), sizeof(float) * heads, s));
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(alpha_host, alpha_.data(), sizeof(float) * gs, s));
    SCD_RETURN_IF_ERROR(wait_and_append());
    SCD_RETURN_IF_ERROR(cache_.ExternalZoom(l, hq, absl::MakeConstSpan(lse_host, heads),
                                            absl::MakeConstSpan(alpha_host, gs)));
    int32_t* edits = host_edits_.as<int32_t>();
    for (int g = 0; g < groups; ++g) {
      const int* expanded = cache_.expanded(g);
      for (int j = 0; j < ns; ++j) {
        if (expanded[j] == 0) continue;
        edits[2 * num_edits] = g * ns + j;
        edits[2 * num_edits + 1] = expanded[j];
        ++num_edits;
      }
    }
    if (num_edits > 0) {
      SCD_RETURN_IF_ERROR(
          cuda::CopyToDevice(edits_.data(), edits, sizeof(int32_t) * 2 * num_edits, s));
    }
  } else {
    SCD_RETURN_IF_ERROR(wait_and_append());
  }
  SCD_RETURN_IF_ERROR(Mark(
      cuda::OpClass::kSekvZoom,
      cuda::SekvSummaryStep(d.base_lc.as<float>(), d.remaining.as<int32_t>(), edits_.as<int32_t>(),
                            num_edits, gs, step_lc_.as<float>(), step_skip_.as<uint8_t>(), s),
      s));

  // 5. The resident part of the softmax, while the host waits for the rebuilt rows.
  SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kSekvResident, ResidentSoftmax(l, rows, q, out, s), s));
  if (!zoom) return absl::OkStatus();

  // 6. The expanded rows join the same softmax.
  const size_t block_elements = static_cast<size_t>(groups) * budget_ * hd;
  char* row_k = host_rows_.as<char>();
  char* row_v = row_k + elem_ * block_elements;
  auto put = [&](char* dst, const float* src) {
    if (type_ == KvType::kF32) {
      std::memcpy(dst, src, sizeof(float) * hd);
      return;
    }
    Bf16* out = reinterpret_cast<Bf16*>(dst);
    for (int i = 0; i < hd; ++i) out[i] = cuda::FloatToBf16(src[i]);
  };
  AttentionSegment* table = HostTable(l, 3);
  for (int g = 0; g < groups; ++g) {
    const BufferView b = cache_.ExpandedRows(l, g);
    int n = 0;
    for (int i = 0; i < b.rows; ++i) {
      if (!b.active[i]) continue;
      if (n == budget_) {
        return absl::InternalError(
            absl::StrCat("GpuSekv: more than ", budget_, " expanded rows for layer ", l));
      }
      const size_t dst = elem_ * (static_cast<size_t>(g) * budget_ + n) * hd;
      put(row_k + dst, b.k + static_cast<size_t>(i) * hd);
      put(row_v + dst, b.v + static_cast<size_t>(i) * hd);
      ++n;
    }
    const size_t off = static_cast<size_t>(g) * budget_ * hd;
    table[g * kResidentSegments] = {
        At(d.expanded_k, off), At(d.expanded_v, off), nullptr, nullptr, n, hd, type_, 0};
  }
  const size_t block = elem_ * block_elements;
  SCD_RETURN_IF_ERROR(cuda::CopyToDevice(d.expanded_k.data(), row_k, block, s));
  SCD_RETURN_IF_ERROR(cuda::CopyToDevice(d.expanded_v.data(), row_v, block, s));
  for (int g = 0; g < groups; ++g) {
    for (int j = 1; j < kResidentSegments; ++j) table[g * kResidentSegments + j] = {};
  }
  SCD_RETURN_IF_ERROR(
      cuda::CopyToDevice(DeviceTable(l, 3), table, sizeof(AttentionSegment) * TableSize(), s));
  return MergeExpansion(l, q, out, s);
}

absl::Status GpuSekv::Impl::ResidentLse(int l, int t, int rows, const float* q, bool pins,
                                        StreamHandle s) {
  SCD_RETURN_IF_ERROR(UploadResident(l, t, rows, layers_[l].base_lc.as<float>(), nullptr, pins, s));
  return cuda::SekvAttention(q, DeviceTable(l, t), kResidentSegments, shape_.num_heads,
                             shape_.num_kv_heads, shape_.head_dim, ResidentRows(l, rows),
                             decode_impl_, nullptr, lse_.as<float>(), workspace_.as<float>(),
                             static_cast<int64_t>(workspace_.size() / sizeof(float)), s);
}

absl::Status GpuSekv::Impl::Gate(int l, int rows, const float* q, StreamHandle s) {
  SCD_RETURN_IF_ERROR(ResidentLse(l, 1, rows, q, /*pins=*/true, s));
  const DeviceLayer& d = layers_[l];
  return cuda::SekvRouteGate(q, d.p_q.as<float>(), d.p_k.as<float>(), route_dim_,
                             d.summary_k.data(), type_, shape_.kv_dim(), d.base_lc.as<float>(),
                             d.remaining.as<int32_t>(), d.gates.as<cuda::RouterGateParams>(),
                             lse_.as<float>(), cache_.store(l).num_spans(), shape_.num_heads,
                             shape_.num_kv_heads, shape_.head_dim, alpha_.as<float>(), s);
}

absl::Status GpuSekv::Impl::ResidentSoftmax(int l, int rows, const float* q, float* out,
                                            StreamHandle s) {
  SCD_RETURN_IF_ERROR(UploadResident(l, 2, rows, step_lc_.as<float>(), step_skip_.as<uint8_t>(),
                                     /*pins=*/true, s));
  return cuda::SekvAttention(q, DeviceTable(l, 2), kResidentSegments, shape_.num_heads,
                             shape_.num_kv_heads, shape_.head_dim, ResidentRows(l, rows),
                             decode_impl_, out, lse_.as<float>(), workspace_.as<float>(),
                             static_cast<int64_t>(workspace_.size() / sizeof(float)), s);
}

absl::Status GpuSekv::Impl::MergeExpansion(int l, const float* q, float* out, StreamHandle s) {
  const int heads = shape_.num_heads, hd = shape_.head_dim;
  SCD_RETURN_IF_ERROR(cuda::SekvAttention(
      q, DeviceTable(l, 3), kResidentSegments, heads, shape_.num_kv_heads, hd, budget_,
      decode_impl_, out_e_.as<float>(), lse_e_.as<float>(), workspace_.as<float>(),
      static_cast<int64_t>(workspace_.size() / sizeof(float)), s));
  return cuda::MergeAttention(out, lse_.as<float>(), out_e_.as<float>(), lse_e_.as<float>(), heads,
                              hd, out, s);
}

absl::Status GpuSekv::Impl::ZoomOnDevice(int l, int rows, const float* q, float* out,
                                         StreamHandle s) {
  unsettled_[l] = 1;
  const SpanStore& st = cache_.store(l);
  DeviceLayer& d = layers_[l];
  const int hd = shape_.head_dim, heads = shape_.num_heads;
  const int groups = shape_.num_kv_heads, ns = st.num_spans();
  const bool zoom = cache_.zooms(l);
  // The window's new row (and at the layer's first step its pins) so far: plain attention.
  SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kAttention, absl::OkStatus(), s));
  if (zoom) {
    SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kSekvGate, Gate(l, rows, q, s), s));
    SCD_RETURN_IF_ERROR(Mark(
        cuda::OpClass::kSekvZoom,
        cuda::SekvZoom(
            q, lse_.as<float>(), alpha_.as<float>(), d.tau.as<float>(), d.remaining.as<int32_t>(),
            d.base_lc.as<float>(), d.bases.as<cuda::SpanBasisRef>(),
            pins_ > 0 ? d.pinned_flags.as<uint8_t>() : nullptr, ns, heads, groups, hd, zoom_params_,
            d.expanded_k.data(), d.expanded_v.data(), type_, DeviceTable(l, 3), kResidentSegments,
            step_lc_.as<float>(), step_skip_.as<uint8_t>(), zoom_counts_.as<int64_t>(),
            zoom_ws_.data(), static_cast<int64_t>(zoom_ws_.size()), s),
        s));
  } else {
    SCD_RETURN_IF_ERROR(
        Mark(cuda::OpClass::kSekvZoom,
             cuda::SekvSummaryStep(d.base_lc.as<float>(), d.remaining.as<int32_t>(),
                                   edits_.as<int32_t>(), 0, groups * ns, step_lc_.as<float>(),
                                   step_skip_.as<uint8_t>(), s),
             s));
  }
  // The resident part of the softmax, then the expanded rows merged into it.
  SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kSekvResident, ResidentSoftmax(l, rows, q, out, s), s));
  if (!zoom) return absl::OkStatus();
  SCD_RETURN_IF_ERROR(MergeExpansion(l, q, out, s));
  if (l != last_zoom_layer_) return absl::OkStatus();
  // The step's last zoom-in: the counts of all of them, for Fold.
  counts_copied_ = true;
  return cuda::CopyToHost(host_counts_.data(), zoom_counts_.data(), zoom_counts_.size(), s);
}

MemoryBreakdown GpuSekv::Impl::Memory() const {
  const MemoryBreakdown host = cache_.Memory();
  MemoryBreakdown m;
  const size_t kvd = shape_.kv_dim(), hd = shape_.head_dim, groups = shape_.num_kv_heads;
  for (int l = 0; l < shape_.num_layers; ++l) {
    const SpanStore& st = cache_.store(l);
    const size_t row = 2 * kvd * elem_;  // one position's K and V
    m.anchors += st.num_anchors() * row;
    m.summaries += st.num_spans() * (row + groups * kLayerCountBytes);
    m.window += st.window_rows() * row;
    m.pinned += groups * pins_ * 2 * hd * elem_;
    m.expanded_cache += groups * budget_ * 2 * hd * elem_;
  }
  m.summaries += static_cast<size_t>(num_spans_) * groups * kStepCountBytes;
  m.expanded_cache += zoom_ws_.size();  // the device zoom's scratch
  // The host's LRU of rebuilt rows, which the device zoom never fills.
  m.cpu_bases = host.cpu_bases + (device_zoom_ ? 0 : host.expanded_cache);
  for (const DeviceLayer& d : layers_) {  // the device zoom's tables, flags and pinned copy
    m.summaries += d.bases.size() + d.tau.size();
    m.pinned += d.pinned_flags.size();
    if (d.arena != nullptr) m.cpu_bases += d.arena->size();
  }
  m.full_kv = host.full_kv / sizeof(float) * sizeof(Bf16);
  return m;
}

size_t GpuSekv::Impl::DeviceBytes() const {
  size_t bytes = 0;
  for (const DeviceLayer& d : layers_) {
    for (const DeviceBuffer* b :
         {&d.anchor_k, &d.anchor_v, &d.summary_k, &d.summary_v, &d.window_k, &d.window_v, &d.pin_k,
          &d.pin_v, &d.base_lc, &d.remaining, &d.p_q, &d.p_k, &d.gates, &d.expanded_k,
          &d.expanded_v, &d.bases, &d.tau, &d.pinned_flags}) {
      bytes += b->size();
    }
  }
  for (const DeviceBuffer* b : {&alpha_, &step_lc_, &step_skip_, &lse_, &lse_e_, &out_e_, &edits_,
                                &segments_, &workspace_, &zoom_counts_, &zoom_ws_}) {
    bytes += b->size();
  }
  return bytes;
}

size_t GpuSekv::Impl::HostBytes() const {
  size_t bytes = staging_.capacity() * sizeof(Bf16);
  for (const PinnedBuffer* b : {&host_qkv_, &host_la_, &host_tables_, &host_edits_, &host_rows_,
                                &host_counts_, &host_append_}) {
    bytes += b->size();
  }
  for (const DeviceLayer& d : layers_) {
    if (d.arena != nullptr) bytes += d.arena->size();
  }
  return bytes;
}

GpuSekv::GpuSekv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuSekv::~GpuSekv() = default;

bool GpuSekv::Applies(const Backend& backend) { return cuda::IsCudaBackend(backend); }

size_t GpuSekv::PlanHostBytes(const CacheShape& shape, const SekvOptions& options, GpuTier tier,
                              GpuZoom zoom, int64_t positions) {
  const size_t elem = tier == GpuTier::kBf16 ? sizeof(Bf16) : sizeof(float);
  // At most a span per position.
  const size_t gs = static_cast<size_t>(shape.num_kv_heads) *
                    static_cast<size_t>(std::max<int64_t>(positions, 1));
  const size_t pins = tier == GpuTier::kBf16
                          ? sizeof(Bf16) * shape.num_kv_heads * std::max(options.pin_tokens, 1) *
                                static_cast<size_t>(shape.head_dim)
                          : 0;  // the pins' conversion (UploadRows)
  return StagingFor(shape, gs, options.expand_budget, elem, zoom == GpuZoom::kDevice).total() +
         pins;
}

absl::StatusOr<bool> GpuSekv::ReadsPageableCpuTier(const Backend& backend) {
  SCD_ASSIGN_OR_RETURN(const int device, cuda::CudaBackendDevice(backend));
  SCD_RETURN_IF_ERROR(cuda::SetDevice(device));
  return cuda::DeviceReadsPageableMemory();
}

TierOverhead GpuSekv::PlanOverhead(const CacheShape& shape, const SekvOptions& options,
                                   GpuTier tier, GpuZoom zoom) {
  // In token-equivalents of the backend's cache: a position's K and V rows of a KV head, BF16.
  const double full_row = 2.0 * shape.head_dim * sizeof(Bf16);
  const double layers = std::max(shape.num_layers, 1);
  TierOverhead t;
  t.row = 2.0 * shape.head_dim * (tier == GpuTier::kF32 ? sizeof(float) : sizeof(Bf16)) / full_row;
  // Per span and KV head: each layer's counts, and the step's counts shared by the layers.
  double span_bytes = kLayerCountBytes + kStepCountBytes / layers;
  if (zoom == GpuZoom::kDevice) {
    span_bytes += sizeof(cuda::SpanBasisRef);
    t.per_span_token = 1.0 / full_row;   // the pinned flag
    t.fixed = sizeof(float) / full_row;  // the gate's threshold
    // SekvZoom's scratch, one per KV head for all layers: kSekvZoomArrays ints per candidate,
    // the candidates padded up to a power of two (at most twice as many).
    const double candidates =
        options.resolution == ZoomResolution::kToken ? options.candidate_factor : 1.0;
    t.per_zoom_slot =
        2.0 * cuda::kSekvZoomArrays * sizeof(int32_t) * candidates / (full_row * layers);
  }
  t.per_span = span_bytes / full_row;
  t.counts_included = true;
  return t;
}

absl::StatusOr<std::unique_ptr<GpuSekv>> GpuSekv::Create(Backend& backend, SekvCache& cache,
                                                         GpuTier tier, GpuZoom zoom,
                                                         int window_slack,
                                                         const CpuTierMapping* mapping) {
  if (!Applies(backend)) {
    return absl::InvalidArgumentError(
        absl::StrCat("backend '", std::string(backend.name()), "' is not CUDA"));
  }
  const CacheShape want = CacheShape::FromConfig(backend.model().config);
  const CacheShape have = cache.shape();
  if (have.num_layers != want.num_layers || have.num_heads != want.num_heads ||
      have.num_kv_heads != want.num_kv_heads || have.head_dim != want.head_dim) {
    return absl::InvalidArgumentError("the SEKV cache does not match the backend's model");
  }
  if (cache.teacher_mode()) {
    return absl::InvalidArgumentError("the GPU SEKV path does not run teacher mode");
  }
  // The kernels' limits, checked before anything is uploaded (else the first step would fail
  // with the token already in the device window but not in the host cache).
  const int group = have.num_heads / std::max(have.num_kv_heads, 1);
  const int route_dim = cache.router().route_dim();
  if (group > cuda::kSekvMaxGroup || have.head_dim > cuda::kSekvMaxHeadDim ||
      have.num_kv_heads > 65535 || route_dim > cuda::kMaxRouteDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the GPU SEKV kernels take at most ", cuda::kSekvMaxGroup, " query heads per KV head, ",
        "head_dim ", cuda::kSekvMaxHeadDim, ", 65535 KV heads and route_dim ", cuda::kMaxRouteDim,
        "; this cache has ", group, ", ", have.head_dim, ", ", have.num_kv_heads, " and ",
        route_dim));
  }
  if (window_slack < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GpuSekv: window_slack must be >= 0, got ", window_slack));
  }
  auto impl = std::make_unique<Impl>(backend, cache, tier, zoom, window_slack, mapping);
  SCD_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<GpuSekv>(new GpuSekv(std::move(impl)));
}

absl::Status GpuSekv::Step(int32_t token, int position, std::vector<float>* logits) {
  GpuSekv* const one[] = {this};
  std::vector<std::vector<float>> out;
  SCD_RETURN_IF_ERROR(
      StepBatch(one, absl::MakeConstSpan(&token, 1), absl::MakeConstSpan(&position, 1), &out));
  *logits = std::move(out[0]);
  return absl::OkStatus();
}

absl::Status GpuSekv::StepBatch(absl::Span<GpuSekv* const> mirrors,
                                absl::Span<const int32_t> tokens, absl::Span<const int> positions,
                                std::vector<std::vector<float>>* logits) {
  if (mirrors.empty()) {
    logits->clear();
    return absl::OkStatus();
  }
  std::vector<int32_t> none;
  return StepMixed(mirrors[0]->impl_->backend(), {}, {}, {}, &none, mirrors, tokens, positions,
                   logits);
}

absl::Status GpuSekv::StepMixed(Backend& backend, absl::Span<Sequence* const> seqs,
                                absl::Span<const int32_t> seq_tokens,
                                absl::Span<const SampleDraw> draws, std::vector<int32_t>* next,
                                absl::Span<GpuSekv* const> mirrors,
                                absl::Span<const int32_t> tokens, absl::Span<const int> positions,
                                std::vector<std::vector<float>>* logits) {
  std::vector<RowAttention*> attention;
  for (GpuSekv* m : mirrors) {
    if (!m->OnBackend(backend)) {
      return absl::InvalidArgumentError(
          "GPU SEKV step: a mirror was made on another backend than the step's");
    }
    attention.push_back(m->impl_.get());
  }
  ExternalRows external;
  external.tokens = tokens;
  external.positions = positions;
  external.attention = attention;
  SCD_RETURN_IF_ERROR(backend.DecodeMixed(seqs, seq_tokens, draws, next, external, logits));
  // The backend has waited for its stream, where every layer ran, for the logits.
  for (GpuSekv* m : mirrors) m->impl_->Fold();
  return absl::OkStatus();
}

bool GpuSekv::OnBackend(const Backend& backend) const { return &impl_->backend() == &backend; }

absl::Status GpuSekv::Settle(void* stream) { return impl_->Settle(stream); }

absl::Status GpuSekv::Attend(int layer, const float* q, const float* k, const float* v, float* out,
                             void* stream) {
  return impl_->Attend(layer, q, k, v, out, stream);
}

MemoryBreakdown GpuSekv::Memory() const { return impl_->Memory(); }

size_t GpuSekv::DeviceBytes() const { return impl_->DeviceBytes(); }

size_t GpuSekv::HostBytes() const { return impl_->HostBytes(); }

CpuTierAccess GpuSekv::cpu_tier_access() const { return impl_->cpu_tier_access(); }

absl::Status GpuSekv::registration_error() const { return impl_->registration_error(); }

#endif  // SCD_HAVE_CUDA

}  // namespace scd::sekv
