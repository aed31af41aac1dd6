// sekv::GpuSekv's host side (common/sekv/gpu_sekv.cc compiled with SCD_HAVE_CUDA=1) over the
// CPU stand-ins of tests/gpu_host/stub_*.cc: one layer's attention, step after step, equals
// SekvCache::Attend on an identical cache, for every zoom-in setting, with pins, with the
// device window growing past its first allocation, and at 5000 tokens (714 spans, several
// attention splits). The stand-ins compute in double, so 1e-4 relative + 1e-5 absolute; the
// counts of expanded and pinned tokens must be equal. What this cannot see, the device kernels,
// is test_cuda's (gpu_sekv_test.cc runs the same comparison on a GPU).
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/sekv/gpu_sekv.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/zoom_router.h"
#include "kernels/cuda/device_memory.h"
#include "tests/sekv/sekv_test_support.h"

namespace scd::sekv {
namespace {

using testing::Normal;

// A backend that only carries the model's shape (the stand-ins take any backend for CUDA).
class ShapeOnlyBackend : public Backend {
 public:
  explicit ShapeOnlyBackend(const ModelConfig& c) { model_.config = c; }
  std::string_view name() const override { return "shape-only"; }
  const Model& model() const override { return model_; }
  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence(int) override { return Unused(); }
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

void Compare(Backend& backend, const CacheShape& shape, const PrefixKv& prefix,
             const Segmentation& seg, const SekvOptions& o,
             std::shared_ptr<const ZoomRouter> router, int steps) {
  auto host = SekvCache::CreateWithSegmentation(shape, prefix, seg, o, router);
  auto mirrored = SekvCache::CreateWithSegmentation(shape, prefix, seg, o, router);
  REQUIRE(host.ok());
  REQUIRE(mirrored.ok());
  auto gpu = GpuSekv::Create(backend, **mirrored);
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
      const auto k = Normal(shape.kv_dim(), seed + 1, 2.0f), v = Normal(shape.kv_dim(), seed + 2);
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
      for (int i = 0; i < shape.q_dim(); ++i) {
        bad += !(std::fabs(got[i] - want[i]) <= 1e-5 + 1e-4 * std::fabs(want[i]));
      }
      INFO("step " << step << " layer " << l);
      REQUIRE(bad == 0);
    }
  }
  const ZoomStats a = (*host)->zoom_stats(), b = (*mirrored)->zoom_stats();
  CHECK(a.expanded_tokens == b.expanded_tokens);
  CHECK(a.pinned_tokens == b.pinned_tokens);
  CHECK((*host)->store(0).window_rows() == (*mirrored)->store(0).window_rows());
}

}  // namespace

TEST_CASE("GpuSekv's host orchestration reproduces SekvCache::Attend", "[cpu]") {
  struct Shape {
    int layers, kv_heads, head_dim, tokens;
  };
  for (const Shape sh : {Shape{5, 4, 8, 120}, Shape{3, 2, 16, 5000}}) {
    ModelConfig c;
    c.num_layers = sh.layers;
    c.num_heads = 8;
    c.num_kv_heads = sh.kv_heads;
    c.head_dim = sh.head_dim;
    c.hidden_size = c.num_heads * c.head_dim;
    ShapeOnlyBackend backend(c);
    const CacheShape shape = CacheShape::FromConfig(c);
    const int t = sh.tokens;
    PrefixKv prefix;
    prefix.num_tokens = t;
    for (int l = 0; l < shape.num_layers; ++l) {
      prefix.k.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 10 + l, 2.0f));
      prefix.v.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 20 + l));
    }
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
    SECTION("summaries only, 300 steps: the window grows " + std::to_string(t)) {
      SekvOptions o = base;
      o.zoom = false;
      Compare(backend, shape, prefix, seg, o, nullptr, 300);
    }
    SECTION("every token expanded, with pins " + std::to_string(t)) {
      SekvOptions o = base;
      o.store.energy = 1.0;
      o.expand_budget = t;
      o.tau_override = 0.0f;
      o.pin_tokens = 3;
      Compare(backend, shape, prefix, seg, o, nullptr, t > 1000 ? 3 : 20);
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
    ModelConfig c;
    c.num_layers = 1;
    c.num_heads = k.heads;
    c.num_kv_heads = k.kv_heads;
    c.head_dim = k.head_dim;
    c.hidden_size = c.num_heads * c.head_dim;
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

}  // namespace scd::sekv
