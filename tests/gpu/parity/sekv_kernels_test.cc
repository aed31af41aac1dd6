// Parity of the SEKV decode-step kernels (kernels/cuda/scd_sekv_ops.h: SekvAttention, the
// mixed-resolution softmax; SekvRouteGate, the zoom-in gate; SpanRebuildRows, rows rebuilt from
// low-rank bases) with their CPU twins on seeded random inputs. The zoom-in kernel, SekvZoom,
// is sekv_zoom_test.cc's. Tolerances:
//   - SpanRebuildRows 1e-5 relative + 1e-6 absolute (the same sums in another order);
//     SekvRouteGate 1e-5 absolute on α in [0, 1] (exactly 0 for a span with no token left);
//   - SekvAttention (exp, and partial softmax states merged across blocks): 1e-4 relative +
//     1e-5 absolute, lse 1e-4 absolute.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/sekv/low_rank.h"
#include "common/sekv/mixed_attention.h"
#include "common/sekv/zoom_router.h"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

using cuda::Bf16;
using testing::CheckClose;
using testing::DeviceArray;
using testing::kSentinel;
using testing::RandomFloats;
using testing::RequireOk;
using testing::RequireSynced;
using testing::Slice;

// The log-sum-exp of heads with entries within 1e-4; a head without any entry reads <= -1e29.
void CheckLse(const std::vector<float>& got, const std::vector<float>& want,
              const std::string& what) {
  REQUIRE(got.size() == want.size());
  std::vector<float> got_some, want_some;
  for (size_t h = 0; h < want.size(); ++h) {
    if (want[h] > -1e29f) {
      got_some.push_back(got[h]);
      want_some.push_back(want[h]);
      continue;
    }
    INFO(what << ": head " << h << " has no entry, got lse " << got[h]);
    CHECK(got[h] <= -1e29f);
  }
  CheckClose(got_some, want_some, 1e-4, 0, what);
}

constexpr int kHeads = 8, kKvHeads = 2, kHeadDim = 64;  // SekvAttention's shape

// Slot s of every KV head's segment list.
struct SegmentSpec {
  cuda::KvType type;
  bool shared;   // true: [rows, kv_dim], head g at column g·head_dim (a cache or summary
                 // layout, stride kv_dim); false: [num_kv_heads][rows][head_dim] (stride head_dim)
  bool summary;  // with log_count and a skip mask
  std::array<int, kKvHeads> rows;
  bool unaligned = false;  // K and V start one element past a 16-byte boundary
};

// The segments of `specs` for every KV head on the device (slot g·ns + s), and the same data on
// the host as the twin's blocks and skip masks. `all_skipped` (>= 0) marks every summary row of
// that KV head skipped.
class SekvSegments {
 public:
  SekvSegments(const std::vector<SegmentSpec>& specs, int all_skipped, uint64_t seed)
      : ns_(static_cast<int>(specs.size())),
        segments_(static_cast<size_t>(kKvHeads) * ns_),
        blocks_(segments_.size()),
        skips_(segments_.size(), nullptr),
        host_k_(ns_),
        host_v_(ns_),
        host_lc_(ns_),
        host_skip_(ns_) {
    for (int s = 0; s < ns_; ++s) AddSlot(specs[s], s, all_skipped, seed);
  }

  const std::vector<cuda::AttentionSegment>& segments() const { return segments_; }
  // The twin's block and skip mask of KV head g's slot s.
  const sekv::AttentionBlock& block(int g, int s) const { return blocks_[Slot(g, s)]; }
  const uint8_t* skip(int g, int s) const { return skips_[Slot(g, s)]; }
  int max_rows() const { return std::max(totals_[0], totals_[1]); }

 private:
  size_t Slot(int g, int s) const { return static_cast<size_t>(g) * ns_ + s; }
  // Uploads x (BF16 or F32) and returns the address of element `offset` for every KV head.
  std::array<const void*, kKvHeads> Upload(const std::vector<float>& x, bool bf16,
                                           std::array<size_t, kKvHeads> offset) {
    std::array<const void*, kKvHeads> at;
    if (bf16) bf16s_.emplace_back(testing::ToBf16(x));
    if (!bf16) f32s_.emplace_back(x);
    for (int g = 0; g < kKvHeads; ++g) {
      at[g] = bf16 ? static_cast<const void*>(bf16s_.back().get() + offset[g])
                   : static_cast<const void*>(f32s_.back().get() + offset[g]);
    }
    return at;
  }
  // Slot s's log-counts (uploaded; their addresses) and skip mask, [kv_heads][rows_max] each.
  std::array<const void*, kKvHeads> UploadSummary(int s, int rows_max, int all_skipped,
                                                  uint64_t& seed,
                                                  std::array<size_t, kKvHeads> row0) {
    const std::vector<int32_t> counts = testing::RandomInts(kKvHeads * rows_max, seed++, 40);
    host_lc_[s].resize(counts.size());
    host_skip_[s].resize(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) {
      const int g = static_cast<int>(i / rows_max), row = static_cast<int>(i % rows_max);
      host_lc_[s][i] = std::log(1.0f + static_cast<float>(counts[i]));
      host_skip_[s][i] = g == all_skipped || (row * 7 + g) % 5 == 2;
    }
    const std::array<const void*, kKvHeads> at = Upload(host_lc_[s], false, row0);
    skip_devs_.emplace_back(host_skip_[s]);
    return at;
  }
  void AddSlot(const SegmentSpec& sp, int s, int all_skipped, uint64_t& seed);

  int ns_;
  std::vector<cuda::AttentionSegment> segments_;
  std::vector<sekv::AttentionBlock> blocks_;  // the twin's, on the same data
  std::vector<const uint8_t*> skips_;
  std::array<int, kKvHeads> totals_ = {};
  // What the pointers above point into.
  std::vector<std::vector<float>> host_k_, host_v_, host_lc_;
  std::vector<std::vector<uint8_t>> host_skip_;
  std::vector<DeviceArray<float>> f32s_;
  std::vector<DeviceArray<Bf16>> bf16s_;
  std::vector<DeviceArray<uint8_t>> skip_devs_;
};

void SekvSegments::AddSlot(const SegmentSpec& sp, int s, int all_skipped, uint64_t& seed) {
  const int hd = kHeadDim, kv_dim = kKvHeads * hd;
  for (int g = 0; g < kKvHeads; ++g) totals_[g] += sp.rows[g];
  const int rows_max = std::max(sp.rows[0], sp.rows[1]);
  if (rows_max == 0) return;  // an unused slot: rows 0, null pointers
  const bool bf16 = sp.type == cuda::KvType::kBf16;
  const size_t lead = sp.unaligned ? 1 : 0;
  const size_t elems = static_cast<size_t>(rows_max) * kv_dim + lead;  // either layout
  host_k_[s] = RandomFloats(elems, seed++, 2.0f);
  host_v_[s] = RandomFloats(elems, seed++);
  if (bf16) {  // the twin reads the values the kernel reads
    host_k_[s] = testing::RoundedBf16(host_k_[s]);
    host_v_[s] = testing::RoundedBf16(host_v_[s]);
  }
  std::array<size_t, kKvHeads> offset, row0;
  for (int g = 0; g < kKvHeads; ++g) {
    offset[g] = lead + static_cast<size_t>(g) * (sp.shared ? hd : rows_max * hd);
    row0[g] = static_cast<size_t>(g) * rows_max;
  }
  const auto k_at = Upload(host_k_[s], bf16, offset), v_at = Upload(host_v_[s], bf16, offset);
  std::array<const void*, kKvHeads> lc_at = {};
  if (sp.summary) lc_at = UploadSummary(s, rows_max, all_skipped, seed, row0);
  for (int g = 0; g < kKvHeads; ++g) {
    cuda::AttentionSegment& seg = segments_[Slot(g, s)];
    sekv::AttentionBlock& b = blocks_[Slot(g, s)];
    seg.k = k_at[g];
    seg.v = v_at[g];
    seg.rows = b.rows = sp.rows[g];
    seg.stride = b.stride = sp.shared ? kv_dim : hd;
    seg.type = sp.type;
    b.k = host_k_[s].data() + offset[g];
    b.v = host_v_[s].data() + offset[g];
    if (sp.summary) {
      seg.log_count = static_cast<const float*>(lc_at[g]);
      seg.skip = skip_devs_.back().get() + row0[g];
      b.log_count = host_lc_[s].data() + row0[g];
      skips_[Slot(g, s)] = host_skip_[s].data() + row0[g];
    }
  }
}

// The blockwise twin: every query head's output and log-sum-exp over its KV head's segments.
void BlockwiseSekvAttention(const std::vector<float>& q, const SekvSegments& segs, int ns,
                            std::vector<float>* out, std::vector<float>* lse) {
  const int hd = kHeadDim, group = kHeads / kKvHeads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  out->assign(static_cast<size_t>(kHeads) * hd, 0.0f);
  lse->assign(kHeads, 0.0f);
  std::vector<float> scores;
  for (int h = 0; h < kHeads; ++h) {
    const int g = h / group;
    sekv::PartialAttention p;
    p.Reset(hd);
    for (int s = 0; s < ns; ++s) {
      const sekv::AttentionBlock& b = segs.block(g, s);
      if (b.rows == 0) continue;
      scores.resize(b.rows);
      sekv::ScoreBlock(q.data() + h * hd, b, hd, scale, scores.data());
      sekv::AccumulateScored(scores.data(), b, hd, segs.skip(g, s), &p);
    }
    sekv::FinishAttention(p, hd, out->data() + h * hd);
    (*lse)[h] = static_cast<float>(sekv::LogSumExp(p));
  }
}

// Runs SekvAttention on `specs` with both outputs, with lse alone and with out alone, through
// each split kernel (generic and vectorized), and compares each with the blockwise twin.
// `all_skipped` (>= 0) marks every summary row of that KV head skipped; its other segments must be
// empty, so its query heads have no entry.
void CheckSekvAttention(const std::vector<SegmentSpec>& specs, int all_skipped, uint64_t seed) {
  const int hd = kHeadDim, group = kHeads / kKvHeads;
  const int ns = static_cast<int>(specs.size());
  const std::vector<float> q = RandomFloats(static_cast<size_t>(kHeads) * hd, seed++, 2.0f);
  const SekvSegments segs(specs, all_skipped, seed);
  const int max_rows = segs.max_rows();
  std::vector<float> want_out, want_lse;
  BlockwiseSekvAttention(q, segs, ns, &want_out, &want_lse);

  DeviceArray<float> q_dev(q);
  DeviceArray<cuda::AttentionSegment> seg_dev(segs.segments());
  REQUIRE(cuda::launch_checks::VectorizedAttentionSupports(group, hd));
  const int64_t ws_floats = cuda::SekvAttentionWorkspaceFloats(kHeads, hd, max_rows);
  REQUIRE(ws_floats >= 0);
  DeviceArray<float> ws(static_cast<size_t>(std::max<int64_t>(ws_floats, 1)));
  for (const cuda::DecodeImpl impl : {cuda::DecodeImpl::kGeneric, cuda::DecodeImpl::kVectorized}) {
    INFO("impl " << (impl == cuda::DecodeImpl::kGeneric ? "generic" : "vectorized"));
    // Outputs start as garbage, so "zeros when no entry" must be written.
    const std::vector<float> garbage_out(want_out.size(), 123.0f), garbage_lse(kHeads, 123.0f);
    DeviceArray<float> out_dev(garbage_out), lse_dev(garbage_lse);
    DeviceArray<float> lse_only_dev(garbage_lse), out_only_dev(garbage_out);
    const std::pair<float*, float*> calls[] = {{out_dev.get(), lse_dev.get()},
                                               {nullptr, lse_only_dev.get()},  // routing: no V
                                               {out_only_dev.get(), nullptr}};
    for (const auto& [out_ptr, lse_ptr] : calls) {
      RequireOk(cuda::SekvAttention(q_dev.get(), seg_dev.get(), ns, kHeads, kKvHeads, hd, max_rows,
                                    impl, out_ptr, lse_ptr, ws.get(), ws_floats, nullptr));
      RequireSynced();
    }
    const std::vector<float> out = out_dev.ToHost();
    CheckClose(out, want_out, 1e-5, 1e-4, "SekvAttention out");
    CheckLse(lse_dev.ToHost(), want_lse, "SekvAttention lse");
    CheckLse(lse_only_dev.ToHost(), want_lse, "SekvAttention lse without out");
    CheckClose(out_only_dev.ToHost(), want_out, 1e-5, 1e-4, "SekvAttention out without lse");
    if (all_skipped >= 0) {
      const size_t n = static_cast<size_t>(group) * hd;
      CheckClose(Slice(out, all_skipped * n, n), std::vector<float>(n, 0.0f), 0, 0,
                 "out of the query heads without entries");
    }
  }
}

}  // namespace

TEST_CASE("CUDA SekvAttention matches one blockwise softmax over mixed segments", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  using cuda::KvType;
  {
    INFO(
        "F32 anchors, summaries with log-count and skips, a BF16 cache, a per-head buffer "
        "empty for KV head 0");
    CheckSekvAttention({{KvType::kF32, true, false, {50, 50}},
                        {KvType::kF32, true, true, {20, 13}},
                        {KvType::kBf16, true, false, {30, 9}},
                        {KvType::kF32, false, false, {0, 17}}},
                       -1, 400);
  }
  {
    INFO("long segments: split over many chunks and merged");
    CheckSekvAttention({{KvType::kBf16, true, false, {2500, 1200}},
                        {KvType::kF32, true, true, {64, 64}},
                        {KvType::kF32, false, false, {3, 0}},
                        {KvType::kF32, true, false, {0, 2100}}},
                       -1, 420);
  }
  {
    INFO("unaligned K/V (the vectorized kernel's element-wise loads), BF16 and F32");
    CheckSekvAttention({{KvType::kBf16, true, false, {70, 33}, true},
                        {KvType::kF32, true, true, {20, 41}, true},
                        {KvType::kF32, false, false, {9, 100}, true}},
                       -1, 460);
  }
}

TEST_CASE("CUDA SekvAttention gives zeros and lse -1e30 to a KV head with every row skipped",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  using cuda::KvType;
  // Three segment slots; KV head 1 has only summary rows, all skipped.
  CheckSekvAttention({{KvType::kF32, true, false, {40, 0}},
                      {KvType::kF32, true, true, {10, 10}},
                      {KvType::kBf16, false, false, {7, 0}}},
                     1, 440);
}

TEST_CASE("CUDA SekvRouteGate matches the gate of SekvCache::Zoom", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int heads = 4, kv_heads = 2, head_dim = 32, route_dim = 8, spans = 23;
  const int group = heads / kv_heads, kv_dim = kv_heads * head_dim;
  sekv::ZoomRouter router;
  router.Reset(1, kv_heads, head_dim, route_dim);
  router.all_p_q() = RandomFloats(router.all_p_q().size(), 500, 0.3f);
  router.all_p_k() = RandomFloats(router.all_p_k().size(), 501, 0.3f);
  router.gate(0, 0) = {0.3f, 0.8f, -1.0f, 0.5f};  // w_size, w_share, bias, tau
  router.gate(0, 1) = {-0.2f, 1.3f, 0.7f, 0.5f};
  const std::vector<float> q = RandomFloats(static_cast<size_t>(heads) * head_dim, 502);
  const std::vector<int32_t> counts =
      testing::RandomInts(static_cast<size_t>(kv_heads) * spans, 503, 40);
  std::vector<float> log_count(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) log_count[i] = std::log(1.0f + counts[i]);
  std::vector<int32_t> remaining = testing::RandomInts(counts.size(), 504, 4);  // ~1 in 4 is 0
  remaining[0] = 0;
  remaining[spans + 5] = 0;
  std::vector<float> lse = RandomFloats(heads, 505);
  for (float& x : lse) x += 3.0f;  // so that ŝ − LSE spans about [-4, 1]
  std::vector<cuda::RouterGateParams> gates(kv_heads);
  for (int g = 0; g < kv_heads; ++g) {
    const sekv::RouterGate& gt = router.gate(0, g);
    gates[g] = {gt.w_size, gt.w_share, gt.bias, 0.0f};
  }
  // The router has one layer, so its whole [L, G, r, head_dim] tensors are this layer's.
  DeviceArray<float> q_dev(q), pq_dev(router.all_p_q()), pk_dev(router.all_p_k());
  DeviceArray<float> lc_dev(log_count), lse_dev(lse);
  DeviceArray<int32_t> rem_dev(remaining);
  DeviceArray<cuda::RouterGateParams> gates_dev(gates);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (const auto& [stride, type] :
       {std::pair{kv_dim, cuda::KvType::kF32}, std::pair{kv_dim + 8, cuda::KvType::kF32},
        std::pair{kv_dim, cuda::KvType::kBf16}}) {
    const bool bf16 = type == cuda::KvType::kBf16;
    INFO("summary stride " << stride << (bf16 ? ", BF16" : ", F32"));
    // BF16 summaries: the reference reads the rounded values the kernel widens.
    std::vector<float> summary_k = RandomFloats(static_cast<size_t>(spans) * stride, 506);
    if (bf16) summary_k = testing::RoundedBf16(summary_k);
    std::vector<float> want(counts.size(), 0.0f), q_route(head_dim), s_hat(spans);
    for (int g = 0; g < kv_heads; ++g) {
      const float* lc = log_count.data() + static_cast<size_t>(g) * spans;
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const float* qh = q.data() + static_cast<size_t>(h) * head_dim;
        router.RouteQuery(0, g, qh, q_route.data());
        // ŝ as ResidentScores computes it for the summaries.
        sekv::ScoreBlock(qh, {summary_k.data() + g * head_dim, nullptr, spans, stride, lc},
                         head_dim, scale, s_hat.data());
        for (int s = 0; s < spans; ++s) {
          if (remaining[static_cast<size_t>(g) * spans + s] == 0) continue;
          const float* kbar = summary_k.data() + static_cast<size_t>(s) * stride + g * head_dim;
          float bil = 0;
          for (int c = 0; c < head_dim; ++c) bil += q_route[c] * kbar[c];
          const float z = router.Logit(0, g, bil, lc[s], s_hat[s] - lse[h]);
          float& a = want[static_cast<size_t>(g) * spans + s];
          a = std::max(a, sekv::Sigmoid(z));
        }
      }
    }
    DeviceArray<float> sk_dev(summary_k);
    DeviceArray<Bf16> sk_bf16_dev(testing::ToBf16(summary_k));
    const void* summaries = bf16 ? static_cast<const void*>(sk_bf16_dev.get()) : sk_dev.get();
    DeviceArray<float> alpha_dev(std::vector<float>(want.size(), 0.5f));  // must be overwritten
    RequireOk(cuda::SekvRouteGate(q_dev.get(), pq_dev.get(), pk_dev.get(), route_dim, summaries,
                                  type, stride, lc_dev.get(), rem_dev.get(), gates_dev.get(),
                                  lse_dev.get(), spans, heads, kv_heads, head_dim, alpha_dev.get(),
                                  nullptr));
    RequireSynced();
    const std::vector<float> alpha = alpha_dev.ToHost();
    CheckClose(alpha, want, 1e-5, 0, "SekvRouteGate alpha");
    for (size_t i = 0; i < remaining.size(); ++i) {
      if (remaining[i] != 0) continue;
      INFO("span " << i % spans << " of KV head " << i / spans << " has no token left");
      CHECK(alpha[i] == 0.0f);
    }
  }
}

TEST_CASE("CUDA SpanRebuildRows matches LowRankBasis::ReconstructRow, device and pinned bases",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int n = 20, d = 64;
  // A random span (rank capped at 16) and a nearly rank-3 one (few directions hold the energy).
  const std::vector<float> x0 = RandomFloats(n * d, 600, 0.5f);
  std::vector<float> x1 = RandomFloats(n * d, 601, 0.005f);
  const std::vector<float> left = RandomFloats(n * 3, 602), right = RandomFloats(3 * d, 603, 0.5f);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) {
      for (int j = 0; j < 3; ++j) x1[i * d + c] += left[i * 3 + j] * right[j * d + c];
    }
  }
  const sekv::LowRankBasis bases[2] = {sekv::TruncatedSvd(x0.data(), n, d, d, 0.999, 16),
                                       sekv::TruncatedSvd(x1.data(), n, d, d, 0.999, 16)};
  for (const sekv::LowRankBasis& b : bases) {
    INFO("rank " << b.rank);
    REQUIRE(b.rank >= 1);
    REQUIRE(b.rank <= 16);
  }
  // (basis, row) per job, writing consecutive rows of one output; its last row is not a target.
  const std::vector<std::array<int, 2>> targets = {{0, 0}, {1, 19}, {0, 7},  {1, 3}, {0, 19},
                                                   {1, 0}, {0, 12}, {1, 11}, {1, 5}};
  const int jobs = static_cast<int>(targets.size());
  std::vector<float> want(static_cast<size_t>(jobs + 1) * d, kSentinel);
  for (int j = 0; j < jobs; ++j) {
    bases[targets[j][0]].ReconstructRow(targets[j][1], want.data() + static_cast<size_t>(j) * d);
  }
  for (bool pinned : {false, true}) {  // pinned: basis 1 is read from page-locked host memory
    INFO("basis 1 in pinned host memory: " << pinned);
    std::vector<DeviceArray<float>> dev;
    cuda::PinnedBuffer pins[2];
    auto place = [&](const float* x, size_t n, cuda::PinnedBuffer* pin) -> const float* {
      if (pin == nullptr) {
        dev.emplace_back(std::vector<float>(x, x + n));
        return dev.back().get();
      }
      RequireOk(pin->Reserve(n * sizeof(float)));
      std::memcpy(pin->data(), x, n * sizeof(float));
      return pin->as<float>();
    };
    const float* us[2] = {place(bases[0].us, bases[0].us_size(), nullptr),
                          place(bases[1].us, bases[1].us_size(), pinned ? &pins[0] : nullptr)};
    const float* vt[2] = {place(bases[0].vt, bases[0].vt_size(), nullptr),
                          place(bases[1].vt, bases[1].vt_size(), pinned ? &pins[1] : nullptr)};
    DeviceArray<float> out_dev(std::vector<float>(want.size(), kSentinel));
    std::vector<cuda::RebuildJob> job_list(jobs);
    for (int j = 0; j < jobs; ++j) {
      const int b = targets[j][0];
      job_list[j].us_row = us[b] + static_cast<size_t>(targets[j][1]) * bases[b].rank;
      job_list[j].vt = vt[b];
      job_list[j].out = out_dev.get() + static_cast<size_t>(j) * d;
      job_list[j].rank = bases[b].rank;
    }
    DeviceArray<cuda::RebuildJob> jobs_dev(job_list);
    RequireOk(cuda::SpanRebuildRows(jobs_dev.get(), jobs, d, nullptr));
    RequireSynced();
    CheckClose(out_dev.ToHost(), want, 1e-6, 1e-5, "SpanRebuildRows");
  }
}

}  // namespace scd
