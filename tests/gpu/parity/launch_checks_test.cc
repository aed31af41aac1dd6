// The launchers' argument checks (kernels/cuda/launch_checks.h). The boundary cases check the
// limits themselves, host code only. The refusal cases call every launcher that checks its
// arguments with a call it must refuse, pointers never touched, and require the status the
// shared check gives: in test_cuda on a GPU and in test_cuda_emu these are the launchers of
// kernels/cuda/*.cu, in test_cuda_host the CPU stand-ins (tests/gpu/standin/), so a stand-in
// that accepted what the device refuses would fail here in CI.
#include "kernels/cuda/launch_checks.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/scd_rebuilder.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

namespace lc = cuda::launch_checks;
using cuda::AttentionImpl;

bool Refused(const absl::Status& s) { return s.code() == absl::StatusCode::kInvalidArgument; }

// RoPE: an even head_dim up to twice the table's half.
void CheckRopeLimits() {
  CHECK(lc::RopeHeadDim(2 * lc::kRopeMaxHalf).ok());
  CHECK(Refused(lc::RopeHeadDim(2 * lc::kRopeMaxHalf + 2)));
  CHECK(Refused(lc::RopeHeadDim(63)));
  CHECK(Refused(lc::RopeHeadDim(0)));
}

// PrefillAttention's kernel: tensor cores (WMMA or mma.sync) or the generic path, and the
// shapes each refuses.
void CheckPrefillKernelChoice() {
  alignas(16) static const cuda::Bf16 kv[16] = {};
  const cuda::Bf16* misaligned = kv + 1;
  // kAuto takes the tensor cores for head_dim 64 and 128 with aligned K/V, else the generic path.
  CHECK(lc::PrefillTensorCores(kv, kv, 8, 4, 64, AttentionImpl::kAuto).value());
  CHECK(lc::PrefillTensorCores(kv, kv, 8, 4, 128, AttentionImpl::kAuto).value());
  CHECK_FALSE(lc::PrefillTensorCores(kv, kv, 8, 4, 96, AttentionImpl::kAuto).value());
  CHECK_FALSE(lc::PrefillTensorCores(misaligned, kv, 8, 4, 64, AttentionImpl::kAuto).value());
  CHECK_FALSE(lc::PrefillTensorCores(kv, kv, 8, 4, 64, AttentionImpl::kGeneric).value());
  CHECK_FALSE(lc::PrefillTensorCores(kv, kv, 8, 4, lc::kPrefillMaxHeadDim, AttentionImpl::kGeneric)
                  .value());
  CHECK(
      Refused(lc::PrefillTensorCores(kv, kv, 8, 4, lc::kPrefillMaxHeadDim + 1, AttentionImpl::kAuto)
                  .status()));
  CHECK(Refused(lc::PrefillTensorCores(kv, kv, 8, 4, 96, AttentionImpl::kTensorCore).status()));
  CHECK(Refused(
      lc::PrefillTensorCores(kv, misaligned, 8, 4, 64, AttentionImpl::kTensorCore).status()));
  // The mma.sync kernel only when asked for, with the same limits.
  CHECK(lc::PrefillTensorCores(kv, kv, 8, 4, 128, AttentionImpl::kTensorCoreMma).value());
  CHECK(Refused(lc::PrefillTensorCores(kv, kv, 8, 4, 96, AttentionImpl::kTensorCoreMma).status()));
  CHECK(Refused(
      lc::PrefillTensorCores(misaligned, kv, 8, 4, 64, AttentionImpl::kTensorCoreMma).status()));
  CHECK(Refused(lc::PrefillTensorCores(kv, kv, 6, 4, 64, AttentionImpl::kAuto).status()));
  CHECK(Refused(lc::PrefillTensorCores(kv, kv, 8, 0, 64, AttentionImpl::kAuto).status()));
}

// The vectorized decode kernel: head_dim / 8 lanes a power of two up to 32, groups 1, 2, 4
// and 8, group * head_dim within the 8 warps' shared sums; kAuto falls back to the generic
// kernel elsewhere, kVectorized is refused there.
void CheckVectorizedDecodeChoice() {
  using cuda::DecodeImpl;
  for (const int hd : {8, 16, 32, 64, 128}) CHECK(lc::VectorizedAttentionSupports(8, hd));
  CHECK(lc::VectorizedAttentionSupports(4, 256));
  CHECK_FALSE(lc::VectorizedAttentionSupports(8, 256));  // 2048 > kVectorizedMaxGroupDims
  for (const int hd : {0, 4, 24, 48, 96, 512}) CHECK_FALSE(lc::VectorizedAttentionSupports(1, hd));
  for (const int group : {1, 2, 4, 8}) CHECK(lc::VectorizedAttentionSupports(group, 64));
  for (const int group : {3, 6, 16}) CHECK_FALSE(lc::VectorizedAttentionSupports(group, 64));
  CHECK(lc::TakesVectorized("DecodeAttention", 32, 8, 128, DecodeImpl::kAuto).value());
  CHECK(lc::TakesVectorized("DecodeAttention", 32, 8, 128, DecodeImpl::kVectorized).value());
  CHECK_FALSE(lc::TakesVectorized("DecodeAttention", 32, 8, 128, DecodeImpl::kGeneric).value());
  CHECK_FALSE(lc::TakesVectorized("DecodeAttention", 4, 4, 96, DecodeImpl::kAuto).value());
  CHECK(
      Refused(lc::TakesVectorized("DecodeAttention", 4, 4, 96, DecodeImpl::kVectorized).status()));
}

// A runtime shape to the template instance built for it, or the caller's refusal.
void CheckIntConstantInstances() {
  auto instance = [](int value) {
    int got = 0;
    const absl::Status s = lc::WithIntConstant<1, 2, 4, 8>(value, "no instance", [&](auto c) {
      got = decltype(c)::value;
      return absl::OkStatus();
    });
    return s.ok() ? got : (s.message() == "no instance" && Refused(s) ? -1 : -2);
  };
  for (const int v : {1, 2, 4, 8}) CHECK(instance(v) == v);
  for (const int v : {0, 3, 16}) CHECK(instance(v) == -1);
  CHECK(lc::WithIntConstant<64>(64, "x", [](auto) {
          return absl::InternalError("launch");
        }).message() == "launch");  // the launch's own status comes back
}

// SekvShape (group, KV heads, head_dim), SekvSegments and RouteDim.
void CheckSekvLimits() {
  CHECK(lc::SekvShape("x", cuda::kSekvMaxGroup, 1, cuda::kSekvMaxHeadDim).ok());
  CHECK(Refused(lc::SekvShape("x", cuda::kSekvMaxGroup + 1, 1, 64)));
  CHECK(Refused(lc::SekvShape("x", 8, 1, cuda::kSekvMaxHeadDim + 1)));
  CHECK(Refused(lc::SekvShape("x", 8, 3, 64)));
  CHECK(lc::SekvSegments(lc::kSekvMaxSegments, 0).ok());
  CHECK(Refused(lc::SekvSegments(lc::kSekvMaxSegments + 1, 0)));
  CHECK(Refused(lc::SekvSegments(0, 0)));
  CHECK(Refused(lc::SekvSegments(1, -1)));
  CHECK(lc::RouteDim(cuda::kMaxRouteDim).ok());
  CHECK(Refused(lc::RouteDim(cuda::kMaxRouteDim + 1)));
  CHECK(Refused(lc::RouteDim(0)));
}

// ReuseDecode's head_dim and ranks.
void CheckReuseDecodeLimits() {
  CHECK(lc::ReuseDecode(128, 1, cuda::kMaxCodeRank).ok());
  CHECK(Refused(lc::ReuseDecode(128, cuda::kMaxCodeRank + 1, 8)));
  CHECK(Refused(lc::ReuseDecode(128, 8, 0)));
  CHECK(Refused(lc::ReuseDecode(127, 8, 8)));
  // Within those limits the block's shared memory always fits: the largest ranks and head_dim
  // take exactly the 48 KB.
  CHECK(lc::ReuseDecodeSharedBytes(2 * lc::kRopeMaxHalf, cuda::kMaxCodeRank, cuda::kMaxCodeRank) ==
        lc::kBlockSharedBytes);
  CHECK(lc::ReuseDecode(2 * lc::kRopeMaxHalf, cuda::kMaxCodeRank, cuda::kMaxCodeRank).ok());
}

// SampleRows' shape, the workspace check's message, and SekvZoom's workspace and candidates.
void CheckSampleAndWorkspaceLimits() {
  alignas(16) static const cuda::Bf16 kv[16] = {};
  CHECK(lc::SampleShape(1, 1 << 30).ok());
  CHECK(Refused(lc::SampleShape(2, 1 << 30)));
  CHECK(Refused(lc::SampleShape(0, 10)));
  CHECK(lc::Workspace("x", 10, 10, "floats").ok());
  CHECK(lc::Workspace("DecodeAttention", 9, 10, "floats").message() ==
        "DecodeAttention: workspace holds 9 floats, needs 10");
  cuda::ZoomParams zoom;
  zoom.budget = 4;
  zoom.candidate_budget = cuda::kMaxZoomCandidates;
  const int64_t need = cuda::SekvZoomWorkspaceBytes(2, zoom.candidate_budget);
  CHECK(lc::Zoom(3, zoom, 2, kv, need).ok());
  CHECK(Refused(lc::Zoom(3, zoom, 2, kv, need - 1)));
  CHECK(Refused(lc::Zoom(3, zoom, 2, nullptr, need)));
  zoom.candidate_budget = cuda::kMaxZoomCandidates + 1;
  CHECK(Refused(lc::Zoom(3, zoom, 2, kv, INT64_MAX)));
}

TEST_CASE("The launch checks accept each kernel limit and refuse one past it", "[cpu]") {
  CheckRopeLimits();
  CheckPrefillKernelChoice();
  CheckVectorizedDecodeChoice();
  CheckIntConstantInstances();
  CheckSekvLimits();
  CheckReuseDecodeLimits();
  CheckSampleAndWorkspaceLimits();
}

TEST_CASE("A rebuild spec the REUSE decode would refuse is refused when it is checked", "[cpu]") {
  // One REUSE layer, its decoders sized for its ranks.
  auto spec = [](int head_dim, int rank_k, int rank_v) {
    cuda::RebuildSpec s;
    s.hidden_size = 16;
    s.num_kv_heads = 1;
    s.head_dim = head_dim;
    s.inv_freq.assign(head_dim / 2, 1.0f);
    cuda::RebuildLayerSpec l;
    l.rank_k = rank_k;
    l.rank_v = rank_v;
    l.dec_k.assign(static_cast<size_t>(rank_k) * head_dim, 0.0f);
    l.dec_v.assign(static_cast<size_t>(rank_v) * head_dim, 0.0f);
    l.mu_k.assign(head_dim, 0.0f);
    l.mu_v.assign(head_dim, 0.0f);
    s.layers.push_back(std::move(l));
    return s;
  };
  CHECK(spec(64, 8, cuda::kMaxCodeRank).Validate().ok());
  const std::pair<cuda::RebuildSpec, absl::Status> refused[] = {
      {spec(64, 8, cuda::kMaxCodeRank + 1), lc::ReuseDecode(64, 8, cuda::kMaxCodeRank + 1)},
      {spec(2 * lc::kRopeMaxHalf + 2, 8, 8), lc::ReuseDecode(2 * lc::kRopeMaxHalf + 2, 8, 8)},
  };
  for (const auto& [s, kernel] : refused) {
    const absl::Status got = s.Validate();
    INFO(got);
    CHECK(Refused(got));
    CHECK(got.message() == absl::StrCat("rebuild spec layer 0: ", kernel.message()));
  }
}

// A call a launcher must refuse, with what it returned and what the shared check returns.
using RefusedCall = std::pair<std::string, std::pair<absl::Status, absl::Status>>;

// Arguments of calls every launcher refuses before anything is queued: the pointers are never
// read or written.
struct BadCallArgs {
  BadCallArgs() {
    alignas(16) static float host[64] = {};
    f = host;
    kv = reinterpret_cast<const cuda::Bf16*>(host);
    misaligned = kv + 1;
    key.rank = 8;
    value.rank = cuda::kMaxCodeRank + 1;
    zoom.budget = 4;
    zoom.candidate_budget = cuda::kMaxZoomCandidates + 1;
    const absl::StatusOr<size_t> sample_bytes = cuda::SampleRowsWorkspaceBytes(2, 100);
    REQUIRE(sample_bytes.ok());
    sample_need = *sample_bytes;
  }

  float* f = nullptr;
  const cuda::Bf16* kv = nullptr;
  const cuda::Bf16* misaligned = nullptr;
  const cuda::KvCacheTable table{};
  cuda::LowRankDecoder key, value;
  cuda::ZoomParams zoom;
  const int64_t decode_need = cuda::DecodeAttentionWorkspaceFloats(2, 100, 8, 2, 64);
  const int64_t sekv_need = cuda::SekvAttentionWorkspaceFloats(8, 64, 100);
  size_t sample_need = 0;
};

// PrefillAttention's and DecodeAttention's refusals.
std::vector<RefusedCall> BadAttentionCalls(const BadCallArgs& a) {
  return {
      {"PrefillAttention, 6 query heads over 4 KV heads",
       {cuda::PrefillAttention(a.f, 0, a.kv, a.kv, a.f, 0, 4, 0, 6, 4, 64, 0, AttentionImpl::kAuto,
                               nullptr),
        lc::PrefillTensorCores(a.kv, a.kv, 6, 4, 64, AttentionImpl::kAuto).status()}},
      {"PrefillAttention, tensor cores at head_dim 96",
       {cuda::PrefillAttention(a.f, 0, a.kv, a.kv, a.f, 0, 4, 0, 4, 4, 96, 0,
                               AttentionImpl::kTensorCore, nullptr),
        lc::PrefillTensorCores(a.kv, a.kv, 4, 4, 96, AttentionImpl::kTensorCore).status()}},
      {"PrefillAttention, tensor cores on misaligned K",
       {cuda::PrefillAttention(a.f, 0, a.misaligned, a.kv, a.f, 0, 4, 0, 4, 4, 64, 0,
                               AttentionImpl::kTensorCore, nullptr),
        lc::PrefillTensorCores(a.misaligned, a.kv, 4, 4, 64, AttentionImpl::kTensorCore).status()}},
      {"DecodeAttention, a short workspace",
       {cuda::DecodeAttention(a.f, 0, a.table, 0, nullptr, 2, 100, 8, 2, 64, 0,
                              cuda::DecodeImpl::kAuto, a.f, 0, a.f, a.decode_need - 1, nullptr),
        lc::Workspace("DecodeAttention", a.decode_need - 1, a.decode_need, "floats")}},
      {"DecodeAttention, the vectorized kernel at head_dim 96",
       {cuda::DecodeAttention(a.f, 0, a.table, 0, nullptr, 2, 100, 8, 2, 96, 0,
                              cuda::DecodeImpl::kVectorized, a.f, 0, a.f, 1 << 20, nullptr),
        lc::TakesVectorized("DecodeAttention", 8, 2, 96, cuda::DecodeImpl::kVectorized).status()}},
  };
}

// RoPE, the REUSE decode and sampling.
std::vector<RefusedCall> BadRopeRebuildSampleCalls(const BadCallArgs& a) {
  return {
      {"ApplyRope, an odd head_dim",
       {cuda::ApplyRope(a.f, 1, 4, 63, 252, nullptr, a.f, nullptr), lc::RopeHeadDim(63)}},
      {"RopeStoreKv, head_dim past the RoPE table",
       {cuda::RopeStoreKv(a.f, a.f, 0, 1, nullptr, nullptr, a.table, 0, 1, 2 * lc::kRopeMaxHalf + 2,
                          a.f, nullptr),
        lc::RopeHeadDim(2 * lc::kRopeMaxHalf + 2)}},
      {"ReuseDecodeStoreKv, a V rank past kMaxCodeRank",
       {cuda::ReuseDecodeStoreKv(a.f, a.f, 1, a.key, a.value, nullptr, nullptr, a.table, 0, 1, 64,
                                 a.f, nullptr),
        lc::ReuseDecode(64, a.key.rank, a.value.rank)}},
      {"SampleRows, a short workspace",
       {cuda::SampleRows(a.f, nullptr, 2, 100, nullptr, a.f, a.sample_need - 1, nullptr),
        lc::Workspace("SampleRows", static_cast<int64_t>(a.sample_need) - 1,
                      static_cast<int64_t>(a.sample_need), "bytes")}},
  };
}

// The SEKV kernels' refusals.
std::vector<RefusedCall> BadSekvCalls(const BadCallArgs& a) {
  return {
      {"SekvAttention, 17 query heads on one KV head",
       {cuda::SekvAttention(a.f, nullptr, 1, 17, 1, 64, 100, cuda::DecodeImpl::kAuto, a.f, a.f, a.f,
                            INT64_MAX, nullptr),
        lc::SekvShape("SekvAttention", 17, 1, 64)}},
      {"SekvAttention, one segment too many",
       {cuda::SekvAttention(a.f, nullptr, lc::kSekvMaxSegments + 1, 8, 2, 64, 100,
                            cuda::DecodeImpl::kAuto, a.f, a.f, a.f, INT64_MAX, nullptr),
        lc::SekvSegments(lc::kSekvMaxSegments + 1, 100)}},
      {"SekvAttention, a short workspace",
       {cuda::SekvAttention(a.f, nullptr, 2, 8, 2, 64, 100, cuda::DecodeImpl::kAuto, a.f, a.f, a.f,
                            a.sekv_need - 1, nullptr),
        lc::Workspace("SekvAttention", a.sekv_need - 1, a.sekv_need, "floats")}},
      {"SekvAttention, the vectorized kernel at group 16",
       {cuda::SekvAttention(a.f, nullptr, 2, 16, 1, 64, 100, cuda::DecodeImpl::kVectorized, a.f,
                            a.f, a.f, INT64_MAX, nullptr),
        lc::TakesVectorized("SekvAttention", 16, 1, 64, cuda::DecodeImpl::kVectorized).status()}},
      {"SekvAttention, a short workspace (generic)",
       {cuda::SekvAttention(a.f, nullptr, 2, 8, 2, 64, 100, cuda::DecodeImpl::kGeneric, a.f, a.f,
                            a.f, a.sekv_need - 1, nullptr),
        lc::Workspace("SekvAttention", a.sekv_need - 1, a.sekv_need, "floats")}},
      {"SekvRouteGate, route_dim past kMaxRouteDim",
       {cuda::SekvRouteGate(a.f, a.f, a.f, cuda::kMaxRouteDim + 1, a.kv, cuda::KvType::kBf16, 64,
                            a.f, nullptr, nullptr, a.f, 3, 8, 2, 64, a.f, nullptr),
        lc::RouteDim(cuda::kMaxRouteDim + 1)}},
      {"SekvRouteGate, head_dim past kSekvMaxHeadDim",
       {cuda::SekvRouteGate(a.f, a.f, a.f, 16, a.kv, cuda::KvType::kBf16, 64, a.f, nullptr, nullptr,
                            a.f, 3, 8, 2, cuda::kSekvMaxHeadDim + 2, a.f, nullptr),
        lc::SekvShape("SekvRouteGate", 8, 2, cuda::kSekvMaxHeadDim + 2)}},
      {"SpanRebuildRows, head_dim 0",
       {cuda::SpanRebuildRows(nullptr, 3, 0, nullptr), lc::PositiveHeadDim("SpanRebuildRows", 0)}},
      {"MergeAttention, head_dim 0",
       {cuda::MergeAttention(a.f, a.f, a.f, a.f, 8, 0, a.f, nullptr),
        lc::PositiveHeadDim("MergeAttention", 0)}},
      {"SekvZoom, a candidate budget past kMaxZoomCandidates",
       {cuda::SekvZoom(a.f, a.f, a.f, a.f, nullptr, a.f, nullptr, nullptr, 3, 8, 2, 64, a.zoom, a.f,
                       a.f, cuda::KvType::kF32, nullptr, 1, a.f, nullptr, nullptr, a.f, INT64_MAX,
                       nullptr),
        lc::Zoom(3, a.zoom, 2, a.f, INT64_MAX)}},
  };
}

TEST_CASE("Every checked launcher refuses a bad call with the shared check's status", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const BadCallArgs args;
  std::vector<RefusedCall> calls = BadAttentionCalls(args);
  for (std::vector<RefusedCall> more : {BadRopeRebuildSampleCalls(args), BadSekvCalls(args)}) {
    calls.insert(calls.end(), more.begin(), more.end());
  }
  for (const auto& [what, statuses] : calls) {
    const auto& [got, want] = statuses;
    INFO(what << ": got " << got << ", want " << want);
    CHECK(Refused(want));
    CHECK(got == want);
  }
  testing::RequireSynced();
}

}  // namespace
}  // namespace scd
