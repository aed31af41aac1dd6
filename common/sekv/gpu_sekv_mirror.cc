// GpuSekv's device tier (gpu_sekv_impl.h): its set-up from the host cache, the device
// zoom's view of the CPU tier, its growth, and the memory it takes.
#if SCD_HAVE_CUDA
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sekv/gpu_sekv_impl.h"

namespace scd::sekv {
namespace {

using cuda::AttentionSegment;
using cuda::Bf16;
using cuda::DeviceBuffer;
using cuda::KvType;
using cuda::PinnedBuffer;
using cuda::StreamHandle;
using gpu_sekv_internal::DeviceLayer;
using gpu_sekv_internal::kLayerCountBytes;
using gpu_sekv_internal::kResidentSegments;
using gpu_sekv_internal::kStepCountBytes;
using gpu_sekv_internal::kTables;
using gpu_sekv_internal::kZoomCounts;
using gpu_sekv_internal::PinnedStaging;
using gpu_sekv_internal::StagingFor;
using gpu_sekv_internal::Upload;

}  // namespace

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
  const SekvOptions& o = cache_.options();
  num_spans_ = static_cast<int>(cache_.segmentation().spans.size());
  budget_ = cache_.zooms(0) ? o.expand_budget : 0;
  pins_ = o.pin_tokens;
  route_dim_ = cache_.router().route_dim();
  SCD_ASSIGN_OR_RETURN(const cuda::KernelChoices kernels, cuda::KernelChoicesOf(backend_));
  decode_impl_ = kernels.decode_attention;  // the split attention the backend's decode runs
  SCD_ASSIGN_OR_RETURN(clock_, cuda::OpClockOf(backend_));
  const size_t gs = static_cast<size_t>(shape_.num_kv_heads) * num_spans_;
  const StreamHandle s = nullptr;  // one-off uploads, waited for below
  layers_.resize(shape_.num_layers);
  for (int l = 0; l < shape_.num_layers; ++l) SCD_RETURN_IF_ERROR(InitLayer(l, s));
  SCD_RETURN_IF_ERROR(ReserveStepBuffers(gs));
  const PinnedStaging pinned = StagingFor(shape_, gs, budget_, elem_, device_zoom_);
  SCD_RETURN_IF_ERROR(host_qkv_.Reserve(pinned.qkv));
  SCD_RETURN_IF_ERROR(host_la_.Reserve(pinned.la));
  SCD_RETURN_IF_ERROR(host_tables_.Reserve(pinned.tables));
  SCD_RETURN_IF_ERROR(host_edits_.Reserve(pinned.edits));
  SCD_RETURN_IF_ERROR(host_rows_.Reserve(pinned.rows));
  if (device_zoom_) SCD_RETURN_IF_ERROR(InitDeviceZoom(pinned, s));
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(s));
  // The uploads above were staged before their calls returned: the conversion buffer (as large
  // as a layer's largest tier) goes now; the pins' uploads at the first step take little.
  std::vector<Bf16>().swap(staging_);
  return absl::OkStatus();
}

absl::Status GpuSekv::Impl::InitLayer(int l, StreamHandle s) {
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), groups = shape_.num_kv_heads;
  const SekvOptions& o = cache_.options();
  const ZoomRouter& router = cache_.router();
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
  return d.expanded_v.Reserve(rows, "sekv expansion");
}

absl::Status GpuSekv::Impl::ReserveStepBuffers(size_t gs) {
  // The workspace of every step the device window holds without growing (the splits are not
  // monotonic in the rows, so the most over them), so that DeviceBytes() stays put meanwhile.
  int64_t workspace = 0;
  for (int l = 0; l < shape_.num_layers; ++l) {
    const int most = ResidentRows(l, layers_[l].window_capacity);
    for (int rows = ResidentRows(l, cache_.store(l).window_rows()); rows <= most; ++rows) {
      workspace = std::max(workspace, WorkspaceFloats(rows));
    }
  }
  const int heads = shape_.num_heads, qd = shape_.q_dim();
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
  return segments_.Reserve(sizeof(AttentionSegment) * tables, "sekv segments");
}

absl::Status GpuSekv::Impl::InitDeviceZoom(const PinnedStaging& pinned, StreamHandle s) {
  const SekvOptions& o = cache_.options();
  const int groups = shape_.num_kv_heads;
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
  SCD_ASSIGN_OR_RETURN(const size_t floats, CpuTierFloatsToCopy(l, in_place));
  float* arena = nullptr;
  if (floats > 0) {
    d.arena = std::make_unique<PinnedBuffer>();
    SCD_RETURN_IF_ERROR(d.arena->Reserve(sizeof(float) * floats));
    arena = d.arena->as<float>();
  }
  auto place = [&](const float* x, size_t n) -> const float* {
    if (in_place || n == 0) return x;
    if (const cuda::HostRegistration* r = RegistrationOf(registered, x, n)) {
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
  SCD_RETURN_IF_ERROR(InitExpansionTable(l, s));
  last_zoom_layer_ = l;
  if (pins_ > 0) {
    SCD_RETURN_IF_ERROR(d.pinned_flags.Reserve(std::max<size_t>(groups * tokens, 1), "sekv pins"));
    SCD_RETURN_IF_ERROR(cuda::SetDeviceBytes(d.pinned_flags.data(), 0, d.pinned_flags.size(), s));
  }
  return absl::OkStatus();
}

const cuda::HostRegistration* GpuSekv::Impl::RegistrationOf(
    const std::vector<std::unique_ptr<cuda::HostRegistration>>& registered, const float* x,
    size_t n) {
  for (const auto& r : registered) {
    if (r->Contains(x, sizeof(float) * n)) return r.get();
  }
  return nullptr;
}

absl::StatusOr<size_t> GpuSekv::Impl::CpuTierFloatsToCopy(int l, bool in_place) const {
  const SpanStore& st = cache_.store(l);
  const int groups = shape_.num_kv_heads, ns = st.num_spans();
  const auto& registered = mapping_->layers().registered[l];
  size_t floats = 0;
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
        if (RegistrationOf(registered, b->us, b->us_size()) == nullptr) floats += b->us_size();
        if (RegistrationOf(registered, b->vt, b->vt_size()) == nullptr) floats += b->vt_size();
      }
    }
  }
  return floats;
}

absl::Status GpuSekv::Impl::InitExpansionTable(int l, StreamHandle s) {
  DeviceLayer& d = layers_[l];
  AttentionSegment* table = HostTable(l, 3);
  const int hd = shape_.head_dim, groups = shape_.num_kv_heads;
  for (int g = 0; g < groups; ++g) {
    const size_t off = static_cast<size_t>(g) * budget_ * hd;
    table[g * kResidentSegments] = {
        At(d.expanded_k, off), At(d.expanded_v, off), nullptr, nullptr, 0, hd, type_, 0};
    for (int j = 1; j < kResidentSegments; ++j) table[g * kResidentSegments + j] = {};
  }
  return cuda::CopyToDevice(DeviceTable(l, 3), table, sizeof(AttentionSegment) * TableSize(), s);
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

}  // namespace scd::sekv

#endif  // SCD_HAVE_CUDA
