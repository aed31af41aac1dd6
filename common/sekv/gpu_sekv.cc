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
#include "common/sekv/gpu_sekv_impl.h"
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

namespace gpu_sekv_internal {

PinnedStaging StagingFor(const CacheShape& shape, size_t gs, int budget, size_t elem,
                         bool device_zoom) {
  const size_t kvd = shape.kv_dim(), groups = shape.num_kv_heads;
  PinnedStaging p;
  p.qkv = sizeof(float) * (shape.q_dim() + 2 * kvd);
  p.la = sizeof(float) * (shape.num_heads + gs);
  p.tables =
      sizeof(cuda::AttentionSegment) * kTables * groups * kResidentSegments * shape.num_layers;
  p.edits = sizeof(int32_t) * 2 * std::max<size_t>(gs, 1);
  p.rows = elem * 2 * groups * std::max(budget, 1) * static_cast<size_t>(shape.head_dim);
  if (device_zoom) {
    p.counts = sizeof(int64_t) * groups * kZoomCounts;
    p.append = sizeof(float) * 2 * kvd * shape.num_layers;
  }
  return p;
}

}  // namespace gpu_sekv_internal

namespace {

using cuda::Bf16;
using gpu_sekv_internal::kLayerCountBytes;
using gpu_sekv_internal::kStepCountBytes;
using gpu_sekv_internal::StagingFor;

}  // namespace

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
    return absl::InvalidArgumentError(
        absl::StrCat("the GPU SEKV kernels take at most ", cuda::kSekvMaxGroup,
                     " query heads per KV head, ", "head_dim ", cuda::kSekvMaxHeadDim,
                     ", 65535 KV heads and route_dim ", cuda::kMaxRouteDim, "; this cache has ",
                     group, ", ", have.head_dim, ", ", have.num_kv_heads, " and ", route_dim));
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
