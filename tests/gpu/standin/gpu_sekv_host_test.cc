// sekv::GpuSekv's host side (common/sekv/gpu_sekv*.cc compiled with SCD_HAVE_CUDA=1) over the
// CPU stand-ins of tests/gpu/standin/standin_*.cc: one layer's attention, step after step, equals
// SekvCache::Attend on an identical cache, for every zoom-in setting, with pins, with the
// device window growing past its first allocation, and at 5000 tokens (714 spans, several
// attention splits). The stand-ins compute in double, so 1e-4 relative + 1e-5 absolute; the
// counts of expanded and pinned tokens must be equal. What this cannot see, the device kernels,
// is test_cuda's (gpu_sekv_test.cc runs the same comparison on a GPU).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/gpu_sekv.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/zoom_router.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "tests/gpu/standin/standin_memory.h"
#include "tests/sekv/sekv_test_support.h"

namespace scd::sekv {
namespace {

using testing::Normal;

// A backend that only carries the model's shape (the stand-ins take any backend for CUDA).
class ShapeOnlyBackend : public Backend {
 public:
  explicit ShapeOnlyBackend(const ModelConfig& c) { model_.config = c; }
  std::string_view name() const override { return "shape-only"; }
  std::string device_description() const override { return "none"; }
  const Model& model() const override { return model_; }
  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence(int) override { return Unused(); }
  size_t SequenceBytes(int) const override { return 0; }  // it makes no sequence
  absl::Status Prefill(Sequence&, absl::Span<const int32_t>, const PrefillOptions&,
                       PrefillResult*) override {
    return Unused();
  }
  absl::Status AppendKv(Sequence&, const ExternalKv&) override { return Unused(); }
  absl::Status Decode(absl::Span<Sequence* const>, absl::Span<const int32_t>,
                      std::vector<float>*) override {
    return Unused();
  }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("shape-only backend"); }
  Model model_;
};

// A tolerance |got - want| <= atol + rtol |want|.
struct Tolerance {
  double atol, rtol;
};
// F32 tier: the stand-ins compute in double what the host computes in float.
constexpr Tolerance kF32Tier{1e-5, 1e-4};
// BF16 tier (Compare rounds the inputs to BF16, as the CUDA backend's KV cache holds them):
// every row the device reads is then exact but the span summaries, means rounded on the device
// only (relative error 2^-9), which moves a summary's score by up to |q||k̄| 2^-9 / sqrt(d) and
// its weight by about that much relatively. Measured: at most 0.015 over these cases, with
// |q| ~ 2 sqrt(d) and the 5000-token prompt's 714 summaries.
constexpr Tolerance kBf16Tier{3e-2, 3e-2};

// A model config of this attention shape (for ShapeOnlyBackend).
ModelConfig ShapeConfig(int layers, int heads, int kv_heads, int head_dim) {
  ModelConfig c;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.hidden_size = heads * head_dim;
  return c;
}

// `t` positions of N(0, 2²) keys and N(0, 1) values per layer, surprisal 1.
PrefixKv RandomPrefix(const CacheShape& shape, int t) {
  PrefixKv prefix;
  prefix.num_tokens = t;
  for (int l = 0; l < shape.num_layers; ++l) {
    prefix.k.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 10 + l, 2.0f));
    prefix.v.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 20 + l));
  }
  prefix.surprisal.assign(t, 1.0f);
  return prefix;
}

// One step's device inputs in one buffer of N(0, 2²) values: q [q_dim], then k and v [kv_dim],
// then room for the output [q_dim] at 3 q_dim.
cuda::DeviceBuffer StepInputs(const CacheShape& shape) {
  auto buffer = cuda::DeviceBuffer::Allocate(sizeof(float) * 4 * shape.q_dim(), "test array");
  REQUIRE(buffer.ok());
  const auto x = Normal(4 * shape.q_dim(), 7, 2.0f);
  REQUIRE(cuda::CopyToDeviceSync(buffer->data(), x.data(), sizeof(float) * x.size()).ok());
  return std::move(buffer).value();
}

// One step of every layer on StepInputs' buffer `d` (q, k, v; the output at 3 q_dim), on the
// legacy stream, with no wait.
void AttendEveryLayer(GpuSekv& gpu, const CacheShape& shape, float* d) {
  const float *q = d, *k = d + shape.q_dim(), *v = k + shape.kv_dim();
  for (int l = 0; l < shape.num_layers; ++l) {
    REQUIRE(gpu.Attend(l, q, k, v, d + 3 * shape.q_dim(), nullptr).ok());
  }
}

// A shape-only backend of ShapeConfig(layers, heads, kv_heads, head_dim), a prompt of `t`
// random positions (RandomPrefix) in spans of 7 to 10 tokens with anchors 0 and 17, and cache
// options with `pins` pinned tokens, an expansion budget of `budget` rows and every span a
// zoom candidate (so every layer zooms at every step).
struct ZoomFixture {
  ZoomFixture(int layers, int heads, int kv_heads, int head_dim, int t, int pins, int budget)
      : backend(ShapeConfig(layers, heads, kv_heads, head_dim)),
        shape(CacheShape::FromConfig(backend.model().config)),
        prefix(RandomPrefix(shape, t)),
        seg(testing::ChunkedSegmentation(t, 7, 10, {0, 17})) {
    o.pin_tokens = pins;
    o.expand_budget = budget;
    o.tau_override = 0.0f;
  }
  ShapeOnlyBackend backend;
  const CacheShape shape;
  const PrefixKv prefix;
  const Segmentation seg;
  SekvOptions o;
};

// A GpuSekv of a cache of `prefix` in `seg` and `o` (*cache), after one decode step through
// every layer (the pins are chosen, the window grows by one row): its Memory().
MemoryBreakdown MemoryAfterOneStep(Backend& backend, const CacheShape& shape,
                                   const PrefixKv& prefix, const Segmentation& seg,
                                   const SekvOptions& o, GpuTier tier, GpuZoom zoom,
                                   std::unique_ptr<SekvCache>* cache) {
  auto made = SekvCache::CreateWithSegmentation(shape, prefix, seg, o, nullptr);
  REQUIRE(made.ok());
  *cache = std::move(made).value();
  auto gpu = GpuSekv::Create(backend, **cache, tier, zoom);
  REQUIRE(gpu.ok());
  const cuda::DeviceBuffer buffer = StepInputs(shape);
  AttendEveryLayer(**gpu, shape, buffer.as<float>());
  REQUIRE(cuda::SynchronizeStream(nullptr).ok());
  return (*gpu)->Memory();
}

// One zoom of Compare (below).
void CompareZoom(Backend& backend, const CacheShape& shape, const PrefixKv& prefix,
                 const Segmentation& seg, const SekvOptions& o,
                 std::shared_ptr<const ZoomRouter> router, int steps, GpuTier tier, Tolerance tol,
                 GpuZoom zoom) {
  // The BF16 tier gets BF16 values (the CUDA backend's KV cache holds them), so that every
  // row but the span summaries (means, rounded on the device only) is exact on the device.
  const bool bf16 = tier == GpuTier::kBf16;
  auto rounded = [bf16](std::vector<float> x) {
    if (bf16) {
      for (float& f : x) f = cuda::RoundToBf16(f);
    }
    return x;
  };
  PrefixKv input = prefix;
  for (auto& x : input.k) x = rounded(std::move(x));
  for (auto& x : input.v) x = rounded(std::move(x));
  auto host = SekvCache::CreateWithSegmentation(shape, input, seg, o, router);
  auto mirrored = SekvCache::CreateWithSegmentation(shape, input, seg, o, router);
  REQUIRE(host.ok());
  REQUIRE(mirrored.ok());
  auto gpu = GpuSekv::Create(backend, **mirrored, tier, zoom);
  INFO(gpu.status());
  REQUIRE(gpu.ok());
  auto device = [](size_t floats) {
    auto buffer = cuda::DeviceBuffer::Allocate(sizeof(float) * floats, "test array");
    REQUIRE(buffer.ok());
    return std::move(buffer).value();
  };
  const cuda::DeviceBuffer dq = device(shape.q_dim()), dk = device(shape.kv_dim()),
                           dv = device(shape.kv_dim()), dout = device(shape.q_dim());
  for (int step = 0; step < steps; ++step) {
    for (int l = 0; l < shape.num_layers; ++l) {
      const uint64_t seed = 1000 + 16 * step + l;
      const auto q = Normal(shape.q_dim(), seed, 2.0f);
      const auto k = rounded(Normal(shape.kv_dim(), seed + 1, 2.0f));
      const auto v = rounded(Normal(shape.kv_dim(), seed + 2));
      std::vector<float> want(shape.q_dim()), got(shape.q_dim());
      (*host)->Attend(l, q.data(), k.data(), v.data(), want.data());
      // GpuSekv reads and writes device memory (the stand-ins check that it is).
      REQUIRE(cuda::CopyToDeviceSync(dq.data(), q.data(), sizeof(float) * q.size()).ok());
      REQUIRE(cuda::CopyToDeviceSync(dk.data(), k.data(), sizeof(float) * k.size()).ok());
      REQUIRE(cuda::CopyToDeviceSync(dv.data(), v.data(), sizeof(float) * v.size()).ok());
      const absl::Status s = (*gpu)->Attend(l, dq.as<float>(), dk.as<float>(), dv.as<float>(),
                                            dout.as<float>(), nullptr);
      INFO(s);
      REQUIRE(s.ok());
      REQUIRE(cuda::CopyToHostSync(got.data(), dout.data(), sizeof(float) * got.size()).ok());
      int bad = 0;
      double worst = 0;
      for (int i = 0; i < shape.q_dim(); ++i) {
        const double err = std::fabs(got[i] - want[i]);
        bad += !(err <= tol.atol + tol.rtol * std::fabs(want[i]));
        worst = std::max(worst, err);
      }
      INFO("step " << step << " layer " << l << ": max abs error " << worst);
      REQUIRE(bad == 0);
    }
  }
  REQUIRE((*gpu)->Settle(nullptr).ok());
  const ZoomStats a = (*host)->zoom_stats(), b = (*mirrored)->zoom_stats();
  CHECK(a.steps == b.steps);
  CHECK(a.expanded_spans == b.expanded_spans);
  CHECK(a.expanded_tokens == b.expanded_tokens);
  CHECK(a.candidate_tokens == b.candidate_tokens);
  CHECK(a.pinned_tokens == b.pinned_tokens);
  for (int l = 0; l < shape.num_layers; ++l) {
    CHECK((*host)->store(l).window_rows() == (*mirrored)->store(l).window_rows());
  }
}

// Runs `steps` steps of random q/k/v through a host SekvCache and a GpuSekv over an identical
// one, comparing every layer's output, with the zoom on the device and on the host.
void Compare(Backend& backend, const CacheShape& shape, const PrefixKv& prefix,
             const Segmentation& seg, const SekvOptions& o,
             std::shared_ptr<const ZoomRouter> router, int steps, GpuTier tier = GpuTier::kF32,
             Tolerance tol = kF32Tier) {
  for (const GpuZoom zoom : {GpuZoom::kDevice, GpuZoom::kHost}) {
    INFO((zoom == GpuZoom::kDevice ? "device zoom" : "host zoom"));
    CompareZoom(backend, shape, prefix, seg, o, router, steps, tier, tol, zoom);
  }
}

}  // namespace

TEST_CASE("GpuSekv's host orchestration reproduces SekvCache::Attend", "[cpu]") {
  struct Shape {
    int layers, kv_heads, head_dim, tokens;
  };
  for (const Shape sh : {Shape{5, 4, 8, 120}, Shape{3, 2, 16, 5000}}) {
    const ModelConfig c = ShapeConfig(sh.layers, 8, sh.kv_heads, sh.head_dim);
    ShapeOnlyBackend backend(c);
    const CacheShape shape = CacheShape::FromConfig(c);
    const int t = sh.tokens;
    PrefixKv prefix = RandomPrefix(shape, t);
    prefix.surprisal = Normal(t, 5, 3.0f);
    for (float& s : prefix.surprisal) s = std::fabs(s);
    const Segmentation seg = testing::ChunkedSegmentation(t, 7, 10, {0, 17});
    SekvOptions base;
    base.async_fetch = true;
    INFO(t << " tokens, " << seg.spans.size() << " spans");
    SECTION("token zoom with pins, random router " + std::to_string(t)) {
      SekvOptions o = base;
      o.pin_tokens = 4;
      o.expand_budget = 6;
      Compare(backend, shape, prefix, seg, o, testing::RandomRouter(shape), 4);
    }
    SECTION("span zoom, random router " + std::to_string(t)) {
      SekvOptions o = base;
      o.resolution = ZoomResolution::kSpan;
      o.expand_budget = 10;
      Compare(backend, shape, prefix, seg, o, testing::RandomRouter(shape), 4);
    }
    SECTION("default router, expansion buffer of 2 " + std::to_string(t)) {
      SekvOptions o = base;
      o.expand_budget = 2;
      Compare(backend, shape, prefix, seg, o, nullptr, 4);
    }
    // These two run in both tiers: no selection can flip on BF16 rounding here (gates and
    // pins are checked in F32 above; the BF16 gate is sekv_kernels_test's).
    SECTION("summaries only, 300 steps: the window grows " + std::to_string(t)) {
      SekvOptions o = base;
      o.zoom = false;
      Compare(backend, shape, prefix, seg, o, nullptr, 300);
      Compare(backend, shape, prefix, seg, o, nullptr, 300, GpuTier::kBf16, kBf16Tier);
    }
    // With every token expanded no summary is read, so the BF16 tier must agree with the host
    // as closely as the F32 tier does: it loses nothing but the rounding of rows that are
    // BF16 already.
    SECTION("every token expanded, with pins " + std::to_string(t)) {
      SekvOptions o = base;
      o.store.energy = 1.0;
      o.expand_budget = t;
      o.tau_override = 0.0f;
      o.pin_tokens = 3;
      const int steps = t > 1000 ? 3 : 20;
      Compare(backend, shape, prefix, seg, o, nullptr, steps);
      Compare(backend, shape, prefix, seg, o, nullptr, steps, GpuTier::kBf16, kF32Tier);
    }
    SECTION("pins and a 64-token buffer at tau 0.1 " + std::to_string(t)) {
      SekvOptions o = base;
      o.pin_tokens = 5;
      o.expand_budget = 64;
      o.tau_override = 0.1f;
      Compare(backend, shape, prefix, seg, o, testing::RandomRouter(shape), 5);
    }
  }
}

TEST_CASE("GpuSekv::Memory counts the device's rows in the tier's element type", "[cpu]") {
  const ModelConfig c = ShapeConfig(3, 8, 4, 8);
  ShapeOnlyBackend backend(c);
  const CacheShape shape = CacheShape::FromConfig(c);
  const int t = 120, budget = 6, pins = 4;
  const PrefixKv prefix = RandomPrefix(shape, t);
  const Segmentation seg = testing::ChunkedSegmentation(t, 7, 10, {0, 17});
  SekvOptions o;
  o.pin_tokens = pins;
  o.expand_budget = budget;
  auto run = [&](GpuTier tier, std::unique_ptr<SekvCache>* cache, GpuZoom zoom = GpuZoom::kHost) {
    return MemoryAfterOneStep(backend, shape, prefix, seg, o, tier, zoom, cache);
  };
  std::unique_ptr<SekvCache> c32, c16;
  const MemoryBreakdown m32 = run(GpuTier::kF32, &c32), m16 = run(GpuTier::kBf16, &c16);
  const MemoryBreakdown host = c32->Memory();
  REQUIRE(host.pinned > 0);
  REQUIRE(c32->store(0).window_rows() == c16->store(0).window_rows());
  // F32 rows are the host's rows. The device keeps 8 bytes of counts per (layer, KV head,
  // span) and 5 per (KV head, span) for the step.
  CHECK(m32.anchors == host.anchors);
  CHECK(m32.window == host.window);
  CHECK(m32.pinned == host.pinned);
  CHECK(m32.expanded_cache == host.expanded_cache);
  CHECK(m32.expanded_cache ==
        sizeof(float) * shape.num_layers * shape.num_kv_heads * budget * 2 * shape.head_dim);
  size_t spans = 0;
  for (int l = 0; l < shape.num_layers; ++l) spans += c32->store(l).num_spans();
  const size_t layer_spans = spans / shape.num_layers;
  CHECK(m32.summaries == spans * (sizeof(float) * 2 * shape.kv_dim() + shape.num_kv_heads * 8) +
                             layer_spans * shape.num_kv_heads * 5);
  // BF16 halves every K/V row; the counts stay.
  CHECK(2 * m16.anchors == m32.anchors);
  CHECK(2 * m16.window == m32.window);
  CHECK(2 * m16.pinned == m32.pinned);
  CHECK(2 * m16.expanded_cache == m32.expanded_cache);
  CHECK(m32.summaries - m16.summaries == spans * sizeof(cuda::Bf16) * 2 * shape.kv_dim());
  // The full cache is the CUDA backend's BF16 one; the CPU tier is the host's, LRU included.
  CHECK(2 * m16.full_kv == host.full_kv);
  CHECK(m32.full_kv == m16.full_kv);
  CHECK(m16.cpu_bases == host.cpu_bases + host.expanded_cache);
  // So the F32 tier takes twice the device fraction that the BF16 tier takes, but for the
  // counts (which at head_dim 8 weigh: 64 bytes per span for 4 KV heads against 128 of BF16
  // summary rows; at head_dim 128 they are under 4%).
  INFO("host " << host.gpu_ratio() << " bf16 " << m16.gpu_ratio() << " f32 " << m32.gpu_ratio());
  const size_t counts = spans * shape.num_kv_heads * 8 + layer_spans * shape.num_kv_heads * 5;
  CHECK(m32.gpu() - counts == 2 * (m16.gpu() - counts));

  // The device zoom adds, per layer, its table of the CPU tier (a SpanBasisRef per span and KV
  // head) and the gate thresholds to the summaries, and the pinned flags (a byte per span
  // token and KV head) to the pins; the device reads the CPU tier where it lies (registered:
  // the stand-in device reads no pageable memory), so it counts once; the host's LRU of
  // rebuilt rows is never used.
  std::unique_ptr<SekvCache> cz;
  const MemoryBreakdown mz = run(GpuTier::kBf16, &cz, GpuZoom::kDevice);
  const size_t span_tokens = static_cast<size_t>(cz->span_token_offset(layer_spans));
  CHECK(mz.anchors == m16.anchors);
  CHECK(mz.window == m16.window);
  // The expansion buffer, and the zoom's scratch: 7 ints per KV head and candidate token
  // (2 × the budget of 6, rounded up to 16).
  CHECK(mz.expanded_cache == m16.expanded_cache + shape.num_kv_heads * 7 * 16 * sizeof(int32_t));
  CHECK(mz.summaries == m16.summaries + spans * shape.num_kv_heads * sizeof(cuda::SpanBasisRef) +
                            sizeof(float) * shape.num_layers * shape.num_kv_heads);
  CHECK(mz.pinned == m16.pinned + shape.num_layers * shape.num_kv_heads * span_tokens);
  CHECK(mz.cpu_bases == host.cpu_bases);  // read where it lies; no LRU of rebuilt rows
  CHECK(mz.full_kv == m16.full_kv);
}

namespace {

std::unique_ptr<SekvCache> NewCache(const ZoomFixture& f) {
  auto cache = SekvCache::CreateWithSegmentation(f.shape, f.prefix, f.seg, f.o, nullptr);
  REQUIRE(cache.ok());
  return std::move(cache).value();
}

// True when every layer's arena blocks read as pinned memory, false when none does.
bool ArenaRegistered(const SekvCache& cache, int layers) {
  int pinned = 0, blocks = 0;
  for (int l = 0; l < layers; ++l) {
    for (const BasisArena::Block& b : cache.store(l).basis_blocks()) {
      ++blocks;
      pinned += cuda::standin::IsPinned(b.data, sizeof(float) * b.floats) ? 1 : 0;
    }
  }
  REQUIRE(blocks >= layers);
  REQUIRE((pinned == 0 || pinned == blocks));
  return pinned == blocks;
}

// A mirror of a fresh cache: how it reads the CPU tier and why it could not register it, the
// bases' bytes on the device and on the host, and each layer's attention output of one step.
struct TierRun {
  CpuTierAccess access;
  absl::Status error;
  size_t device_bases, host_bases;
  std::vector<float> out;
};

// One step of every layer, the zoom on the device unless `zoom` says otherwise.
TierRun RunOneStep(ZoomFixture& f, GpuZoom zoom = GpuZoom::kDevice) {
  const CacheShape& shape = f.shape;
  const std::unique_ptr<SekvCache> cache = NewCache(f);
  auto gpu = GpuSekv::Create(f.backend, *cache, GpuTier::kF32, zoom);
  REQUIRE(gpu.ok());
  TierRun r{(*gpu)->cpu_tier_access(), (*gpu)->registration_error(), 0, 0, {}};
  CHECK(ArenaRegistered(*cache, shape.num_layers) == (r.access == CpuTierAccess::kRegistered));
  const cuda::DeviceBuffer buffer = StepInputs(shape);
  float* d = buffer.as<float>();
  std::vector<float> out(shape.q_dim());
  const float *q = d, *k = d + shape.q_dim(), *v = k + shape.kv_dim();
  for (int l = 0; l < shape.num_layers; ++l) {
    REQUIRE((*gpu)->Attend(l, q, k, v, d + 3 * shape.q_dim(), nullptr).ok());
    REQUIRE(
        cuda::CopyToHostSync(out.data(), d + 3 * shape.q_dim(), sizeof(float) * out.size()).ok());
    r.out.insert(r.out.end(), out.begin(), out.end());
  }
  REQUIRE((*gpu)->Settle(nullptr).ok());
  REQUIRE(cache->zoom_stats().expanded_tokens > 0);
  r.device_bases = (*gpu)->Memory().cpu_bases;
  r.host_bases = cache->Memory().cpu_bases;
  gpu->reset();
  // Unregistered with the mirror, before the cache goes.
  CHECK_FALSE(ArenaRegistered(*cache, shape.num_layers));
  return r;
}

// Two requests' mirrors at once: each arena's pages are its own, so both register. A mirror
// destroyed with its last step still queued: its own registrations go after its device
// buffers, whose freeing waits for the device.
void CheckTwoMirrorsRegister(ZoomFixture& f) {
  const std::unique_ptr<SekvCache> a = NewCache(f), b = NewCache(f);
  auto ga = GpuSekv::Create(f.backend, *a, GpuTier::kF32, GpuZoom::kDevice);
  auto gb = GpuSekv::Create(f.backend, *b, GpuTier::kF32, GpuZoom::kDevice);
  REQUIRE(ga.ok());
  REQUIRE(gb.ok());
  CHECK((*ga)->cpu_tier_access() == CpuTierAccess::kRegistered);
  CHECK((*gb)->cpu_tier_access() == CpuTierAccess::kRegistered);
  CHECK((*gb)->registration_error().ok());
  const cuda::DeviceBuffer buffer = StepInputs(f.shape);
  for (int step = 0; step < 2; ++step) AttendEveryLayer(**gb, f.shape, buffer.as<float>());
  gb->reset();
  CHECK_FALSE(ArenaRegistered(*b, f.shape.num_layers));
}

}  // namespace

TEST_CASE("GpuSekv's device zoom reads the CPU tier where it lies, else from a pinned copy",
          "[cpu]") {
  ZoomFixture f(3, 8, 4, 8, 200, /*pins=*/4, /*budget=*/6);
  // By default the stand-in device takes registrations: no copy.
  const TierRun in_place = RunOneStep(f);
  CHECK(in_place.access == CpuTierAccess::kRegistered);
  CHECK(in_place.error.ok());
  CHECK(in_place.device_bases == in_place.host_bases);
  CheckTwoMirrorsRegister(f);
  {
    // A device that refuses registration reads a pinned copy: the CPU tier twice, the same
    // attention.
    const cuda::standin::StandInDevice refuses(/*registers=*/false, /*reads_pageable=*/false);
    const TierRun copied = RunOneStep(f);
    CHECK(copied.access == CpuTierAccess::kPinnedCopy);
    CHECK(copied.error.code() == absl::StatusCode::kUnimplemented);
    CHECK(copied.device_bases == 2 * copied.host_bases);
    CHECK(copied.out == in_place.out);
  }
  {
    // A device that reads pageable memory reads the bases with neither.
    const cuda::standin::StandInDevice ats(/*registers=*/true, /*reads_pageable=*/true);
    const TierRun pageable = RunOneStep(f);
    CHECK(pageable.access == CpuTierAccess::kPageable);
    CHECK(pageable.device_bases == pageable.host_bases);
    CHECK(pageable.out == in_place.out);
  }
  // The host zoom reads the CPU tier on the host.
  CHECK(RunOneStep(f, GpuZoom::kHost).access == CpuTierAccess::kNone);
  CHECK(std::string(CpuTierAccessName(CpuTierAccess::kPinnedCopy)) == "pinned copy");
}

TEST_CASE("Planned with GpuSekv::PlanOverhead, the device tier stays within the budget", "[cpu]") {
  // head_dim 8 as stories260K: a K/V row is 32 BF16 bytes, so the device's per-span counts
  // and zoom tables (72 bytes a span) weigh more than a summary row itself.
  for (const int head_dim : {8, 64}) {
    const ModelConfig c = ShapeConfig(4, 8, 4, head_dim);
    ShapeOnlyBackend backend(c);
    const CacheShape shape = CacheShape::FromConfig(c);
    const int t = 600;
    PrefixKv prefix = RandomPrefix(shape, t);
    for (int i = 0; i < t; ++i) prefix.surprisal[i] = i % 13 == 5 ? 7.0f : 1.0f + 0.25f * (i % 5);
    for (const double budget : {0.25, 0.4}) {
      for (const GpuTier tier : {GpuTier::kBf16, GpuTier::kF32}) {
        for (const GpuZoom zoom : {GpuZoom::kDevice, GpuZoom::kHost}) {
          INFO("head_dim " << head_dim << ", budget " << budget << ", "
                           << (tier == GpuTier::kBf16 ? "BF16" : "F32") << " rows, zoom on the "
                           << (zoom == GpuZoom::kDevice ? "device" : "host"));
          const TierOverhead over = GpuSekv::PlanOverhead(shape, SekvOptions{}, tier, zoom);
          const BudgetPlan plan = PlanBudget(prefix.surprisal, budget, SekvOptions{},
                                             BudgetShares{}, shape.head_dim, over);
          REQUIRE(plan.sekv.expand_budget > 0);  // room is left for the zoom-in
          std::unique_ptr<SekvCache> cache;
          const MemoryBreakdown m = MemoryAfterOneStep(backend, shape, prefix, plan.segmentation,
                                                       plan.sekv, tier, zoom, &cache);
          INFO("device tier " << m.gpu_ratio() << " of the BF16 full cache");
          CHECK(m.gpu_ratio() <= budget);
          CHECK(m.gpu_ratio() >= 0.6 * budget);  // and the budget is used
        }
      }
    }
  }
}

TEST_CASE("GpuSekv refuses shapes its kernels cannot take, before uploading", "[cpu]") {
  struct Case {
    int heads, kv_heads, head_dim, route_dim;
    bool taken;
    const char* what;
  };
  for (const Case k :
       {Case{32, 1, 8, 4, false, "32 query heads per KV head"},
        Case{2, 1, 512, 4, false, "head_dim 512"}, Case{8, 4, 8, 129, false, "route_dim 129"},
        Case{16, 1, 256, 128, true, "the largest shape the kernels take"}}) {
    INFO(k.what);
    const ModelConfig c = ShapeConfig(1, k.heads, k.kv_heads, k.head_dim);
    ShapeOnlyBackend backend(c);
    const CacheShape shape = CacheShape::FromConfig(c);
    const int t = 40;
    PrefixKv prefix;
    prefix.num_tokens = t;
    prefix.k.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 1));
    prefix.v.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 2));
    prefix.surprisal.assign(t, 1.0f);
    auto router = std::make_shared<ZoomRouter>();
    router->Reset(1, shape.num_kv_heads, shape.head_dim, k.route_dim);
    auto cache = SekvCache::CreateWithSegmentation(
        shape, prefix, testing::ChunkedSegmentation(t, 7, 10, {0}), SekvOptions{}, router);
    REQUIRE(cache.ok());
    auto gpu = GpuSekv::Create(backend, **cache);
    INFO(gpu.status());
    if (k.taken) {
      CHECK(gpu.ok());
    } else {
      CHECK(gpu.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(gpu.status().message().find("GPU SEKV kernels take at most") !=
            absl::string_view::npos);
    }
  }
}

TEST_CASE("GpuSekv refuses a negative window slack; no slack is taken", "[cpu]") {
  const ModelConfig c = ShapeConfig(1, 8, 4, 8);
  ShapeOnlyBackend backend(c);
  const CacheShape shape = CacheShape::FromConfig(c);
  const int t = 40;
  const PrefixKv prefix = RandomPrefix(shape, t);
  for (const int slack : {-1, 0}) {
    INFO("window_slack " << slack);
    auto cache = SekvCache::CreateWithSegmentation(
        shape, prefix, testing::ChunkedSegmentation(t, 7, 10, {0}), SekvOptions{}, nullptr);
    REQUIRE(cache.ok());
    auto gpu = GpuSekv::Create(backend, **cache, GpuTier::kBf16, GpuZoom::kDevice, slack);
    if (slack < 0) {
      CHECK(gpu.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(gpu.status().message().find("window_slack must be >= 0") != absl::string_view::npos);
    } else {
      CHECK(gpu.ok());
    }
  }
}

TEST_CASE("GpuSekv's device zoom waits for the device once per step, the host zoom per layer",
          "[cpu]") {
  ZoomFixture f(4, 8, 2, 16, 300, /*pins=*/3, /*budget=*/8);
  auto& [backend, shape, prefix, seg, o] = f;
  // The host's waits in each of `steps` steps of every layer (after the first step, which
  // picks the pins with a round trip per layer either way), and the rows expanded.
  auto waits = [&](GpuZoom zoom, int steps) {
    auto cache = SekvCache::CreateWithSegmentation(shape, prefix, seg, o, nullptr);
    REQUIRE(cache.ok());
    auto gpu = GpuSekv::Create(backend, **cache, GpuTier::kBf16, zoom);
    REQUIRE(gpu.ok());
    const cuda::DeviceBuffer buffer = StepInputs(shape);
    std::vector<int64_t> per_step;
    for (int step = 0; step < steps; ++step) {
      const int64_t before = cuda::standin::HostWaits();
      AttendEveryLayer(**gpu, shape, buffer.as<float>());
      REQUIRE((*gpu)->Settle(nullptr).ok());
      per_step.push_back(cuda::standin::HostWaits() - before);
    }
    for (int l = 0; l < shape.num_layers; ++l) {
      REQUIRE((*cache)->store(l).window_rows() == seg.window_length() + steps);
    }
    const ZoomStats z = (*cache)->zoom_stats();
    CHECK(z.steps == int64_t{steps} * shape.num_layers * shape.num_kv_heads);
    CHECK(z.expanded_tokens == z.steps * o.expand_budget);
    // The device zoom never asks the host's fetcher (whose slabs are then never allocated).
    CHECK(((*cache)->fetch_stats().requests == 0) == (zoom == GpuZoom::kDevice));
    return per_step;
  };
  const std::vector<int64_t> device = waits(GpuZoom::kDevice, 4);
  const std::vector<int64_t> host = waits(GpuZoom::kHost, 4);
  INFO("device zoom: " << device[0] << ", " << device[1] << ", " << device[2] << ", " << device[3]
                       << "; host zoom: " << host[0] << ", " << host[1] << ", " << host[2] << ", "
                       << host[3]);
  CHECK(device[0] >= shape.num_layers);  // the pins' round trips
  for (int step = 1; step < 4; ++step) {
    CHECK(device[step] == 1);  // Settle's; Step has it in the logits' copy
    CHECK(host[step] >= shape.num_layers);
  }
}

TEST_CASE("GpuSekv's device zoom waits before a layer's next step rewrites its tables", "[cpu]") {
  const ModelConfig c = ShapeConfig(1, 4, 2, 16);
  ShapeOnlyBackend backend(c);
  const CacheShape shape = CacheShape::FromConfig(c);
  const int t = 120;
  const PrefixKv prefix = RandomPrefix(shape, t);
  const Segmentation seg = testing::ChunkedSegmentation(t, 7, 10, {0, 17});
  SekvOptions o;
  o.expand_budget = 6;
  o.tau_override = 0.0f;
  o.pin_tokens = 2;  // the first step picks them, then zooms on the device
  auto host = SekvCache::CreateWithSegmentation(shape, prefix, seg, o, nullptr);
  auto mirrored = SekvCache::CreateWithSegmentation(shape, prefix, seg, o, nullptr);
  REQUIRE(host.ok());
  REQUIRE(mirrored.ok());
  auto gpu = GpuSekv::Create(backend, **mirrored, GpuTier::kF32, GpuZoom::kDevice);
  REQUIRE(gpu.ok());
  const int steps = 3;
  const size_t qd = shape.q_dim(), kvd = shape.kv_dim();
  auto buffer = cuda::DeviceBuffer::Allocate(sizeof(float) * steps * (2 * qd + 2 * kvd), "test");
  REQUIRE(buffer.ok());
  float* d = buffer->as<float>();
  std::vector<std::vector<float>> want(steps, std::vector<float>(qd));
  // Three steps of the one layer queued back to back, with no wait of the caller's between
  // them: each step after the first waits for the one before (a step rewrites the layer's
  // pinned tables, which the stand-ins read when the stream runs).
  for (int step = 0; step < steps; ++step) {
    const auto q = Normal(qd, 100 + step, 2.0f);
    const auto k = Normal(kvd, 200 + step, 2.0f);
    const auto v = Normal(kvd, 300 + step);
    (*host)->Attend(0, q.data(), k.data(), v.data(), want[step].data());
    float* dq = d + step * (2 * qd + 2 * kvd);
    float* dk = dq + qd;
    float* dv = dk + kvd;
    REQUIRE(cuda::CopyToDeviceSync(dq, q.data(), sizeof(float) * qd).ok());
    REQUIRE(cuda::CopyToDeviceSync(dk, k.data(), sizeof(float) * kvd).ok());
    REQUIRE(cuda::CopyToDeviceSync(dv, v.data(), sizeof(float) * kvd).ok());
    const int64_t before = cuda::standin::HostWaits();
    REQUIRE((*gpu)->Attend(0, dq, dk, dv, dv + kvd, nullptr).ok());
    if (step > 0) CHECK(cuda::standin::HostWaits() - before == 1);
  }
  REQUIRE((*gpu)->Settle(nullptr).ok());
  for (int step = 0; step < steps; ++step) {
    std::vector<float> got(qd);
    const float* out = d + step * (2 * qd + 2 * kvd) + qd + 2 * kvd;
    REQUIRE(cuda::CopyToHostSync(got.data(), out, sizeof(float) * qd).ok());
    for (size_t i = 0; i < qd; ++i) {
      INFO("step " << step << " element " << i);
      CHECK(std::fabs(got[i] - want[step][i]) <=
            kF32Tier.atol + kF32Tier.rtol * std::fabs(want[step][i]));
    }
  }
  CHECK((*mirrored)->store(0).window_rows() == (*host)->store(0).window_rows());
}

}  // namespace scd::sekv

namespace scd::sekv {

TEST_CASE(
    "GpuSekv::DeviceBytes is the device memory it allocated, and with the window reserved for "
    "the steps to come it stays put over them",
    "[cpu]") {
  ZoomFixture f(/*layers=*/3, /*heads=*/4, /*kv_heads=*/2, /*head_dim=*/16, /*t=*/200,
                /*pins=*/4, /*budget=*/12);
  const auto in_use = [] {
    const cuda::DeviceMemoryInfo m = cuda::MemoryInfo().value();
    return m.total_bytes - m.free_bytes;
  };
  const cuda::DeviceBuffer inputs = StepInputs(f.shape);
  constexpr int kSteps = 40;
  for (const bool reserved : {true, false}) {
    INFO((reserved ? "window reserved for 40 steps, no slack" : "no reserve, no slack"));
    SekvOptions o = f.o;
    o.generated_reserve = reserved ? kSteps : 0;
    auto cache = SekvCache::CreateWithSegmentation(f.shape, f.prefix, f.seg, o, nullptr);
    REQUIRE(cache.ok());
    const size_t before = in_use();
    auto gpu = GpuSekv::Create(f.backend, **cache, GpuTier::kBf16, GpuZoom::kDevice,
                               /*window_slack=*/0);
    REQUIRE(gpu.ok());
    const size_t bytes = (*gpu)->DeviceBytes();
    // Every allocation rounded to cudaMalloc's 256 bytes by the stand-ins: 18 buffers a layer
    // and 11 others at most.
    CHECK(in_use() - before >= bytes);
    CHECK(in_use() - before <= bytes + 256 * (18 * f.shape.num_layers + 11));
    CHECK(bytes > (*gpu)->Memory().gpu());  // the window's room and the workspaces beyond
    size_t most = bytes;
    for (int step = 0; step < kSteps; ++step) {
      AttendEveryLayer(**gpu, f.shape, inputs.as<float>());
      REQUIRE((*gpu)->Settle(nullptr).ok());
      most = std::max(most, (*gpu)->DeviceBytes());
    }
    if (reserved) {
      CHECK(most == bytes);
    } else {
      CHECK(most > bytes);  // the window grew
    }
  }
}

TEST_CASE(
    "GpuSekv::HostBytes is the pinned memory it allocated once Create has freed its upload "
    "conversion, and within PlanHostBytes over the steps",
    "[cpu]") {
  ZoomFixture f(/*layers=*/3, /*heads=*/4, /*kv_heads=*/2, /*head_dim=*/16, /*t=*/200,
                /*pins=*/4, /*budget=*/12);
  const cuda::DeviceBuffer inputs = StepInputs(f.shape);
  for (const GpuTier tier : {GpuTier::kBf16, GpuTier::kF32}) {
    for (const GpuZoom zoom : {GpuZoom::kDevice, GpuZoom::kHost}) {
      INFO((tier == GpuTier::kBf16 ? "BF16" : "F32")
           << " tier, zoom on the " << (zoom == GpuZoom::kDevice ? "device" : "host"));
      auto cache = SekvCache::CreateWithSegmentation(f.shape, f.prefix, f.seg, f.o, nullptr);
      REQUIRE(cache.ok());
      const size_t before = cuda::standin::PinnedBytesInUse();
      auto gpu = GpuSekv::Create(f.backend, **cache, tier, zoom);
      REQUIRE(gpu.ok());
      // The stand-in device registers the CPU tier, so no pinned copy: HostBytes is its pinned
      // staging alone. A BF16 tier's uploads were converted through a host buffer as large
      // as a layer's largest tier, which Create has freed.
      REQUIRE((*gpu)->cpu_tier_access() != CpuTierAccess::kPinnedCopy);
      const size_t pinned = cuda::standin::PinnedBytesInUse() - before;
      CHECK(pinned > 0);
      CHECK((*gpu)->HostBytes() == pinned);
      // Steps convert the pins' uploads (BF16) through a buffer of at most pin_tokens rows per
      // KV head; the whole stays within the plan the engine reserves host memory by.
      const size_t plan = GpuSekv::PlanHostBytes(f.shape, f.o, tier, zoom, f.prefix.num_tokens);
      CHECK((*gpu)->HostBytes() <= plan);
      for (int step = 0; step < 4; ++step) {
        AttendEveryLayer(**gpu, f.shape, inputs.as<float>());
        REQUIRE((*gpu)->Settle(nullptr).ok());
      }
      const size_t pins = tier == GpuTier::kBf16 ? sizeof(cuda::Bf16) * f.shape.num_kv_heads *
                                                       f.o.pin_tokens * f.shape.head_dim
                                                 : 0;
      CHECK(cuda::standin::PinnedBytesInUse() - before == pinned);
      CHECK((*gpu)->HostBytes() <= pinned + pins);
      CHECK((*gpu)->HostBytes() <= plan);
    }
  }
}

}  // namespace scd::sekv
