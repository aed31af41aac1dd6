// Parity of SCD's consumer-side kernels and of the SEKV decode kernels (kernels/cuda/
// scd_sekv_ops.h, with CublasGemm::MatMulF32 under the PATCH aligner) and of ScdGpuRebuilder
// (kernels/cuda/scd_rebuilder.h) with their CPU twins on seeded random inputs. Tolerances:
//   - F32 math whose summation order or libm differ: MatMulF32 and SiLU 1e-5 relative (+1e-5
//     and 1e-6 absolute), SpanRebuildRows 1e-5 + 1e-6, SekvRouteGate 1e-5 absolute on α in
//     [0, 1] (exactly 0 for a span with no token left); bias adds and BroadcastRow bit-exact;
//   - PatchAlignerForward (three GEMMs around a SiLU) and SekvAttention (exp, and partial
//     softmax states merged across blocks): 1e-4 relative + 1e-5 absolute, lse 1e-4 absolute;
//   - BF16 stores into the KV cache (REUSE decode, the rebuilder): one BF16 ulp, which is 2^-8
//     to 2^-7 of the stored value (2^-7 just above a power of two), so rtol 2^-7, plus 1e-5
//     absolute for values near zero whose F32 error exceeds their ulp. Slots not written must
//     keep their sentinel bit-exactly;
//   - the rebuilder's PATCH layers: the twin runs on the BF16-rounded Ĥ and [W_K; W_V] that the
//     device multiplies; where the F32 Ĥ lies within its error margin of a BF16 rounding
//     boundary the device may round it the other way, and that ulp times |W| is added to the
//     bound (atol 1e-4 for the BF16 GEMM's F32 accumulation).
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/model/config.h"
#include "common/scd/patch_aligner.h"
#include "common/scd/quantize.h"
#include "common/scd/reduced_rank.h"
#include "common/sekv/low_rank.h"
#include "common/sekv/mixed_attention.h"
#include "common/sekv/span_store.h"
#include "common/sekv/surprisal_segmenter.h"
#include "common/sekv/token_zoom.h"
#include "common/sekv/zoom_router.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/scd_rebuilder.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace scd {
namespace {

using cuda::Bf16;
using testing::CheckClose;
using testing::DeviceArray;
using testing::RandomFloats;
using testing::RequireOk;
using testing::RequireSynced;
using testing::Slice;
using testing::Widen;

using testing::kBf16StoreAtol;
using testing::kBf16StoreRtol;
using testing::kSentinel;

// HF's RoPE frequencies for theta = 10000 (the ModelConfig default), no scaling.
std::vector<float> HfInvFreq(int head_dim) {
  ModelConfig config;
  config.head_dim = head_dim;
  return RopeInverseFrequencies(config);
}

LinearCode Decoder(std::vector<float> decoder, std::vector<float> mu, int rank) {
  LinearCode code;
  code.rank = rank;
  code.out_dim = static_cast<int>(mu.size());
  code.decoder = std::move(decoder);
  code.mu_out = std::move(mu);
  return code;
}

// An aligner with random parameters (no MLP when hidden_dim is 0).
PatchAligner RandomAligner(int code_dim, int hidden_dim, int out_dim, uint64_t seed) {
  PatchAligner f;
  f.code_dim = code_dim;
  f.hidden_dim = hidden_dim;
  f.out_dim = out_dim;
  f.a = RandomFloats(static_cast<size_t>(code_dim) * out_dim, seed++, 0.3f);
  f.c = RandomFloats(out_dim, seed++, 0.5f);
  f.b2 = RandomFloats(out_dim, seed++, 0.2f);
  if (hidden_dim > 0) {
    f.w1 = RandomFloats(static_cast<size_t>(code_dim) * hidden_dim, seed++, 0.5f);
    f.b1 = RandomFloats(hidden_dim, seed++, 0.5f);
    f.w2 = RandomFloats(static_cast<size_t>(hidden_dim) * out_dim, seed++, 0.3f);
  }
  return f;
}

// c + b₂ summed in float, as DeviceAlignerView and RebuildLayerSpec take it.
std::vector<float> SummedBias(const PatchAligner& f) {
  std::vector<float> c_b2(f.out_dim);
  for (int j = 0; j < f.out_dim; ++j) c_b2[j] = f.c[j] + f.b2[j];
  return c_b2;
}

// Written cache slots must lie within atol + slack[i] + rtol·|want| (slack empty: none); every
// other slot must still hold its sentinel, bit-exactly.
void CheckCache(const std::vector<Bf16>& cache, const std::vector<float>& want,
                const std::vector<uint8_t>& written, const std::vector<float>& slack, double atol,
                double rtol, const std::string& what) {
  REQUIRE(cache.size() == want.size());
  REQUIRE(written.size() == want.size());
  std::vector<float> got_w, want_w, got_u, want_u;
  for (size_t i = 0; i < want.size(); ++i) {
    const float got = cuda::Bf16ToFloat(cache[i]);
    if (!written[i]) {
      got_u.push_back(got);
      want_u.push_back(want[i]);
      continue;
    }
    // The slack comes off the difference, so that CheckClose bounds what is left.
    const float d = got - want[i], s = slack.empty() ? 0.0f : slack[i];
    const bool keep = s == 0.0f || std::isnan(d);
    got_w.push_back(keep ? got : want[i] + std::copysign(std::max(0.0f, std::abs(d) - s), d));
    want_w.push_back(want[i]);
  }
  CheckClose(got_w, want_w, atol, rtol, what + ", written slots");
  CheckClose(got_u, want_u, 0, 0, what + ", slots not written");
}

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

// Runs SekvAttention on `specs` with both outputs, with lse alone and with out alone, through
// each split kernel (generic and vectorized), and compares each with the blockwise twin.
// `all_skipped` (>= 0) marks every summary row of that KV head skipped; its other segments must be
// empty, so its query heads have no entry.
void CheckSekvAttention(const std::vector<SegmentSpec>& specs, int all_skipped, uint64_t seed) {
  const int hd = kHeadDim, kv_dim = kKvHeads * hd, group = kHeads / kKvHeads;
  const int ns = static_cast<int>(specs.size());
  const std::vector<float> q = RandomFloats(static_cast<size_t>(kHeads) * hd, seed++, 2.0f);
  std::vector<cuda::AttentionSegment> segments(static_cast<size_t>(kKvHeads) * ns);
  std::vector<sekv::AttentionBlock> blocks(segments.size());  // the twin's, on the same data
  std::vector<const uint8_t*> skips(segments.size(), nullptr);
  std::vector<std::vector<float>> host_k(ns), host_v(ns), host_lc(ns);
  std::vector<std::vector<uint8_t>> host_skip(ns);
  std::vector<DeviceArray<float>> f32s;
  std::vector<DeviceArray<Bf16>> bf16s;
  std::vector<DeviceArray<uint8_t>> skip_devs;
  // Uploads x (BF16 or F32) and returns the address of element `offset` for every KV head.
  auto upload = [&](const std::vector<float>& x, bool bf16, std::array<size_t, kKvHeads> offset) {
    std::array<const void*, kKvHeads> at;
    if (bf16) bf16s.emplace_back(testing::ToBf16(x));
    if (!bf16) f32s.emplace_back(x);
    for (int g = 0; g < kKvHeads; ++g) {
      at[g] = bf16 ? static_cast<const void*>(bf16s.back().get() + offset[g])
                   : static_cast<const void*>(f32s.back().get() + offset[g]);
    }
    return at;
  };
  std::array<int, kKvHeads> totals = {};
  for (int s = 0; s < ns; ++s) {
    const SegmentSpec& sp = specs[s];
    for (int g = 0; g < kKvHeads; ++g) totals[g] += sp.rows[g];
    const int rows_max = std::max(sp.rows[0], sp.rows[1]);
    if (rows_max == 0) continue;  // an unused slot: rows 0, null pointers
    const bool bf16 = sp.type == cuda::KvType::kBf16;
    const size_t lead = sp.unaligned ? 1 : 0;
    const size_t elems = static_cast<size_t>(rows_max) * kv_dim + lead;  // either layout
    host_k[s] = RandomFloats(elems, seed++, 2.0f);
    host_v[s] = RandomFloats(elems, seed++);
    if (bf16) {  // the twin reads the values the kernel reads
      host_k[s] = testing::RoundedBf16(host_k[s]);
      host_v[s] = testing::RoundedBf16(host_v[s]);
    }
    std::array<size_t, kKvHeads> offset, row0;
    for (int g = 0; g < kKvHeads; ++g) {
      offset[g] = lead + static_cast<size_t>(g) * (sp.shared ? hd : rows_max * hd);
      row0[g] = static_cast<size_t>(g) * rows_max;
    }
    const auto k_at = upload(host_k[s], bf16, offset), v_at = upload(host_v[s], bf16, offset);
    std::array<const void*, kKvHeads> lc_at = {};
    if (sp.summary) {
      const std::vector<int32_t> counts = testing::RandomInts(kKvHeads * rows_max, seed++, 40);
      host_lc[s].resize(counts.size());
      host_skip[s].resize(counts.size());
      for (size_t i = 0; i < counts.size(); ++i) {
        const int g = static_cast<int>(i / rows_max), row = static_cast<int>(i % rows_max);
        host_lc[s][i] = std::log(1.0f + static_cast<float>(counts[i]));
        host_skip[s][i] = g == all_skipped || (row * 7 + g) % 5 == 2;
      }
      lc_at = upload(host_lc[s], false, row0);
      skip_devs.emplace_back(host_skip[s]);
    }
    for (int g = 0; g < kKvHeads; ++g) {
      const size_t slot = static_cast<size_t>(g) * ns + s;
      cuda::AttentionSegment& seg = segments[slot];
      sekv::AttentionBlock& b = blocks[slot];
      seg.k = k_at[g];
      seg.v = v_at[g];
      seg.rows = b.rows = sp.rows[g];
      seg.stride = b.stride = sp.shared ? kv_dim : hd;
      seg.type = sp.type;
      b.k = host_k[s].data() + offset[g];
      b.v = host_v[s].data() + offset[g];
      if (sp.summary) {
        seg.log_count = static_cast<const float*>(lc_at[g]);
        seg.skip = skip_devs.back().get() + row0[g];
        b.log_count = host_lc[s].data() + row0[g];
        skips[slot] = host_skip[s].data() + row0[g];
      }
    }
  }
  const int max_rows = std::max(totals[0], totals[1]);

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> want_out(static_cast<size_t>(kHeads) * hd), want_lse(kHeads), scores;
  for (int h = 0; h < kHeads; ++h) {
    const int g = h / group;
    sekv::PartialAttention p;
    p.Reset(hd);
    for (int s = 0; s < ns; ++s) {
      const sekv::AttentionBlock& b = blocks[static_cast<size_t>(g) * ns + s];
      if (b.rows == 0) continue;
      scores.resize(b.rows);
      sekv::ScoreBlock(q.data() + h * hd, b, hd, scale, scores.data());
      sekv::AccumulateScored(scores.data(), b, hd, skips[static_cast<size_t>(g) * ns + s], &p);
    }
    sekv::FinishAttention(p, hd, want_out.data() + h * hd);
    want_lse[h] = static_cast<float>(sekv::LogSumExp(p));
  }

  DeviceArray<float> q_dev(q);
  DeviceArray<cuda::AttentionSegment> seg_dev(segments);
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

TEST_CASE("CUDA ReuseDecodeStoreKv matches LinearCode::Decode + cpu::ApplyRope in the cache",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int kv_heads = 2, layers = 3, layer = 1, capacity = 40, rows = 7;
  // Two sequences; rows interleave them at scattered positions (39: the last slot).
  const std::vector<int32_t> row_seq = {0, 1, 1, 0, 1, 0, 0};
  const std::vector<int32_t> positions = {3, 0, 17, 39, 38, 12, 25};
  for (int head_dim : {16, 64}) {
    INFO("head_dim " << head_dim);
    const int kv_dim = kv_heads * head_dim;
    const std::vector<float> inv_freq = HfInvFreq(head_dim);
    const uint64_t seed = 100 + head_dim;
    const int rank_k = 8, rank_v = 24;  // K and V ranks differ
    const LinearCode key =
        Decoder(RandomFloats(rank_k * kv_dim, seed, 0.5f), RandomFloats(kv_dim, seed + 1), rank_k);
    const LinearCode value = Decoder(RandomFloats(rank_v * kv_dim, seed + 2, 0.5f),
                                     RandomFloats(kv_dim, seed + 3), rank_v);
    const std::vector<float> z_k = RandomFloats(rows * rank_k, seed + 4);
    const std::vector<float> z_v = RandomFloats(rows * rank_v, seed + 5);

    std::vector<float> k(static_cast<size_t>(rows) * kv_dim), v(k.size());
    key.Decode(z_k.data(), rows, k.data());
    value.Decode(z_v.data(), rows, v.data());
    cpu::ApplyRope(k.data(), rows, kv_heads, head_dim, positions.data(), inv_freq.data());
    const size_t cache_elems = static_cast<size_t>(layers) * capacity * kv_dim;
    std::vector<std::vector<float>> want_k(2, std::vector<float>(cache_elems, kSentinel));
    std::vector<std::vector<float>> want_v = want_k;
    std::vector<std::vector<uint8_t>> written(2, std::vector<uint8_t>(cache_elems, 0));
    for (int r = 0; r < rows; ++r) {
      const size_t at = (static_cast<size_t>(layer) * capacity + positions[r]) * kv_dim;
      for (int i = 0; i < kv_dim; ++i) {
        want_k[row_seq[r]][at + i] = cuda::RoundToBf16(k[static_cast<size_t>(r) * kv_dim + i]);
        want_v[row_seq[r]][at + i] = cuda::RoundToBf16(v[static_cast<size_t>(r) * kv_dim + i]);
        written[row_seq[r]][at + i] = 1;
      }
    }

    const testing::TestKvCaches caches(2, cache_elems, int64_t{capacity} * kv_dim, kSentinel);
    DeviceArray<float> zk_dev(z_k), zv_dev(z_v), inv_dev(inv_freq);
    DeviceArray<float> dk_dev(key.decoder), muk_dev(key.mu_out);
    DeviceArray<float> dv_dev(value.decoder), muv_dev(value.mu_out);
    DeviceArray<int32_t> seq_dev(row_seq), pos_dev(positions);
    const cuda::LowRankDecoder dk{dk_dev.get(), muk_dev.get(), rank_k};
    const cuda::LowRankDecoder dv{dv_dev.get(), muv_dev.get(), rank_v};
    RequireOk(cuda::ReuseDecodeStoreKv(zk_dev.get(), zv_dev.get(), rows, dk, dv, seq_dev.get(),
                                       pos_dev.get(), caches.table(), layer, kv_heads, head_dim,
                                       inv_dev.get(), nullptr));
    RequireSynced();
    for (int s = 0; s < 2; ++s) {
      INFO("sequence " << s);
      CheckCache(caches.K(s), want_k[s], written[s], {}, kBf16StoreAtol, kBf16StoreRtol, "K cache");
      CheckCache(caches.V(s), want_v[s], written[s], {}, kBf16StoreAtol, kBf16StoreRtol, "V cache");
    }
  }
}

TEST_CASE("CUDA MatMulF32, BiasActivation and BroadcastRow match double loops", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  auto gemm = cuda::CublasGemm::Create(nullptr);
  RequireOk(gemm.status());
  struct Shape {
    int m, n, k;
  };
  uint64_t seed = 200;
  // Not multiples of any tile; a larger one; a single row.
  for (const Shape& s : {Shape{37, 53, 19}, Shape{130, 260, 70}, Shape{1, 129, 5}}) {
    INFO("m " << s.m << " n " << s.n << " k " << s.k);
    const size_t mn = static_cast<size_t>(s.m) * s.n;
    const std::vector<float> x = RandomFloats(static_cast<size_t>(s.m) * s.k, seed++);
    const std::vector<float> w = RandomFloats(static_cast<size_t>(s.k) * s.n, seed++);
    const std::vector<float> bias = RandomFloats(s.n, seed++);
    const std::vector<float> y0 = RandomFloats(mn, seed++, 6.0f);  // SiLU's curved range
    DeviceArray<float> x_dev(x), w_dev(w), bias_dev(bias);
    for (float beta : {0.0f, 1.0f}) {  // y prefilled: overwritten, or accumulated into
      INFO("beta " << beta);
      std::vector<float> want(mn);
      for (int i = 0; i < s.m; ++i) {
        for (int j = 0; j < s.n; ++j) {
          const size_t at = static_cast<size_t>(i) * s.n + j;
          double acc = beta * static_cast<double>(y0[at]);
          for (int c = 0; c < s.k; ++c) {
            acc += static_cast<double>(x[static_cast<size_t>(i) * s.k + c]) *
                   w[static_cast<size_t>(c) * s.n + j];
          }
          want[at] = static_cast<float>(acc);
        }
      }
      DeviceArray<float> y_dev(y0);
      RequireOk((*gemm)->MatMulF32(x_dev.get(), w_dev.get(), y_dev.get(), s.m, s.n, s.k, beta));
      RequireSynced();
      CheckClose(y_dev.ToHost(), want, 1e-5, 1e-5, "MatMulF32");
    }
    for (bool with_bias : {false, true}) {
      for (cuda::Activation act : {cuda::Activation::kNone, cuda::Activation::kSilu}) {
        const bool silu = act == cuda::Activation::kSilu;
        INFO("BiasActivation, bias " << with_bias << " silu " << silu);
        std::vector<float> want(mn);
        for (size_t i = 0; i < mn; ++i) {
          const float pre = y0[i] + (with_bias ? bias[i % s.n] : 0.0f);  // the same F32 add
          want[i] =
              silu ? static_cast<float>(pre / (1.0 + std::exp(-static_cast<double>(pre)))) : pre;
        }
        DeviceArray<float> y_dev(y0);
        RequireOk(cuda::BiasActivation(y_dev.get(), with_bias ? bias_dev.get() : nullptr, s.m, s.n,
                                       act, nullptr));
        RequireSynced();
        CheckClose(y_dev.ToHost(), want, silu ? 1e-6 : 0, silu ? 1e-5 : 0, "BiasActivation");
      }
    }
    DeviceArray<float> b_dev(y0);
    RequireOk(cuda::BroadcastRow(b_dev.get(), bias_dev.get(), s.m, s.n, nullptr));
    RequireSynced();
    std::vector<float> want(mn);
    for (size_t i = 0; i < mn; ++i) want[i] = bias[i % s.n];
    CheckClose(b_dev.ToHost(), want, 0, 0, "BroadcastRow");
  }
}

TEST_CASE("CUDA PatchAlignerForward matches PatchAligner::Apply", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  // A non-blocking stream: the GEMMs and the elementwise kernels must all be ordered on it.
  auto stream = cuda::Stream::Create();
  RequireOk(stream.status());
  auto gemm = cuda::CublasGemm::Create((*stream)->handle());
  RequireOk(gemm.status());
  const int rows = 33;
  for (int hidden_dim : {40, 0}) {  // 0: the linear skip only, no MLP buffers at all
    INFO("hidden_dim " << hidden_dim);
    const bool mlp = hidden_dim > 0;
    const PatchAligner f = RandomAligner(12, hidden_dim, 48, 300);
    const std::vector<float> z = RandomFloats(rows * f.code_dim, 399);
    std::vector<float> want(static_cast<size_t>(rows) * f.out_dim);
    f.Apply(z.data(), rows, want.data());

    const std::vector<float> one(1);  // placeholder upload where the MLP is absent
    DeviceArray<float> a_dev(f.a), c_b2_dev(SummedBias(f)), z_dev(z);
    DeviceArray<float> w1_dev(mlp ? f.w1 : one), b1_dev(mlp ? f.b1 : one);
    DeviceArray<float> w2_dev(mlp ? f.w2 : one), hidden_dev(mlp ? rows * hidden_dim : 1);
    DeviceArray<float> h_dev(std::vector<float>(want.size(), 1e9f));  // must be overwritten
    cuda::DeviceAlignerView view;
    view.code_dim = f.code_dim;
    view.hidden_dim = hidden_dim;
    view.out_dim = f.out_dim;
    view.a = a_dev.get();
    view.c_b2 = c_b2_dev.get();
    view.w1 = mlp ? w1_dev.get() : nullptr;
    view.b1 = mlp ? b1_dev.get() : nullptr;
    view.w2 = mlp ? w2_dev.get() : nullptr;
    RequireOk(cuda::PatchAlignerForward(**gemm, view, z_dev.get(), rows,
                                        mlp ? hidden_dev.get() : nullptr, h_dev.get()));
    RequireOk((*stream)->Synchronize());
    CheckClose(h_dev.ToHost(), want, 1e-5, 1e-4, "PatchAlignerForward");
  }
}

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

TEST_CASE("CUDA ScdGpuRebuilder matches the CPU REUSE and PATCH paths in the cache", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  using Part = cuda::RebuildPart;
  const int hidden = 48, kv_heads = 2, head_dim = 16, kv_dim = kv_heads * head_dim;
  const int layers = 3, tokens = 29, start = 5, capacity = 64;
  cuda::RebuildSpec spec;
  spec.hidden_size = hidden;
  spec.num_kv_heads = kv_heads;
  spec.head_dim = head_dim;
  spec.inv_freq = HfInvFreq(head_dim);
  const PatchAligner aligner = RandomAligner(12, 20, hidden, 700);
  // Layer 0 REUSE only, layer 1 both (as a patched layer of an artifact's rebuilder: PATCH for
  // scd payloads, REUSE for scd-reuse ones), layer 2 REUSE only.
  const int ranks[layers][2] = {{8, 12}, {6, 10}, {5, 16}};
  uint64_t seed = 710;
  // The codes of each part: REUSE z_k/z_v, PATCH z_h.
  std::vector<std::vector<float>> z_k(layers), z_v(layers), z_h(layers);
  for (int l = 0; l < layers; ++l) {
    cuda::RebuildLayerSpec ls;
    if (l == 1) {
      ls.code_dim = aligner.code_dim;
      ls.hidden_dim = aligner.hidden_dim;
      ls.a = aligner.a;
      ls.c_b2 = SummedBias(aligner);
      ls.w1 = aligner.w1;
      ls.b1 = aligner.b1;
      ls.w2 = aligner.w2;
      ls.w_kv = RandomFloats(2 * kv_dim * hidden, seed++, 0.25f);
      ls.b_kv = RandomFloats(2 * kv_dim, seed++, 0.5f);
      z_h[l] = RandomFloats(tokens * ls.code_dim, seed++);
    }
    ls.rank_k = ranks[l][0];
    ls.rank_v = ranks[l][1];
    ls.dec_k = RandomFloats(ls.rank_k * kv_dim, seed++, 0.5f);
    ls.mu_k = RandomFloats(kv_dim, seed++);
    ls.dec_v = RandomFloats(ls.rank_v * kv_dim, seed++, 0.5f);
    ls.mu_v = RandomFloats(kv_dim, seed++);
    z_k[l] = RandomFloats(tokens * ls.rank_k, seed++);
    z_v[l] = RandomFloats(tokens * ls.rank_v, seed++);
    spec.layers.push_back(std::move(ls));
  }
  CHECK(!spec.layers[0].has_patch());
  CHECK(spec.layers[1].has_patch());
  CHECK(spec.layers[1].has_reuse());
  // F32 codes of layer 1 as PATCH (the scd layout) or as REUSE (scd-reuse).
  auto codes_for = [&](Part layer1) {
    std::vector<cuda::LayerCodes> codes(layers);
    for (int l = 0; l < layers; ++l) {
      const Part part = l == 1 ? layer1 : Part::kReuse;
      codes[l].part = part;
      codes[l].z_k = part == Part::kPatch ? z_h[l].data() : z_k[l].data();
      codes[l].z_v = part == Part::kPatch ? nullptr : z_v[l].data();
    }
    return codes;
  };
  const std::vector<cuda::LayerCodes> codes = codes_for(Part::kPatch);

  // The CPU path. slack (PATCH only) bounds what a BF16 rounding of Ĥ the other way can move.
  std::vector<int32_t> positions(tokens);
  for (int t = 0; t < tokens; ++t) positions[t] = start + t;
  const size_t elems = static_cast<size_t>(layers) * capacity * kv_dim;
  struct Expected {
    std::vector<float> k, v, slack_k, slack_v;
    std::vector<uint8_t> written;
  };
  auto expect = [&](Part layer1) {
    Expected x{std::vector<float>(elems, kSentinel), std::vector<float>(elems, kSentinel),
               std::vector<float>(elems, 0.0f), std::vector<float>(elems, 0.0f),
               std::vector<uint8_t>(elems, 0)};
    for (int l = 0; l < layers; ++l) {
      const cuda::RebuildLayerSpec& ls = spec.layers[l];
      std::vector<float> k(static_cast<size_t>(tokens) * kv_dim), v(k.size());
      std::vector<float> ek(k.size(), 0.0f), ev(k.size(), 0.0f);
      if (l != 1 || layer1 == Part::kReuse) {
        Decoder(ls.dec_k, ls.mu_k, ls.rank_k).Decode(z_k[l].data(), tokens, k.data());
        Decoder(ls.dec_v, ls.mu_v, ls.rank_v).Decode(z_v[l].data(), tokens, v.data());
      } else {
        std::vector<float> h(static_cast<size_t>(tokens) * hidden);
        aligner.Apply(z_h[l].data(), tokens, h.data());
        // The device multiplies the BF16 roundings of Ĥ and [W_K; W_V] (F32 accumulation).
        const std::vector<float> h_r = testing::RoundedBf16(h), w_r = testing::RoundedBf16(ls.w_kv);
        std::vector<float> kv(static_cast<size_t>(tokens) * 2 * kv_dim);
        cpu::Linear(h_r.data(), w_r.data(), ls.b_kv.data(), kv.data(), tokens, 2 * kv_dim, hidden);
        // The device's F32 Ĥ is within m of the twin's; rounding is monotone, so both BF16
        // values lie in [R(h − m), R(h + m)].
        std::vector<float> flip(h.size());
        for (size_t i = 0; i < h.size(); ++i) {
          const float m = 3e-5f * (1.0f + std::abs(h[i]));
          flip[i] = cuda::RoundToBf16(h[i] + m) - cuda::RoundToBf16(h[i] - m);
        }
        for (int t = 0; t < tokens; ++t) {
          for (int o = 0; o < 2 * kv_dim; ++o) {
            float e = 0;
            for (int j = 0; j < hidden; ++j) {
              e += std::abs(w_r[o * hidden + j]) * flip[t * hidden + j];
            }
            const size_t at = static_cast<size_t>(t) * kv_dim + o % kv_dim;
            (o < kv_dim ? k : v)[at] = kv[static_cast<size_t>(t) * 2 * kv_dim + o];
            (o < kv_dim ? ek : ev)[at] = e;
          }
        }
      }
      cpu::ApplyRope(k.data(), tokens, kv_heads, head_dim, positions.data(), spec.inv_freq.data());
      // RoPE mixes the pair (i, i + head_dim / 2): either rotated element may carry both slacks.
      for (size_t a = 0; a < ek.size(); ++a) {
        if (a % head_dim < static_cast<size_t>(head_dim / 2)) {
          ek[a] = ek[a + head_dim / 2] = ek[a] + ek[a + head_dim / 2];
        }
      }
      const size_t base = (static_cast<size_t>(l) * capacity + start) * kv_dim;
      for (size_t i = 0; i < k.size(); ++i) {
        x.k[base + i] = cuda::RoundToBf16(k[i]);
        x.v[base + i] = cuda::RoundToBf16(v[i]);
        x.slack_k[base + i] = ek[i];
        x.slack_v[base + i] = ev[i];
        x.written[base + i] = 1;
      }
    }
    return x;
  };
  auto check = [&](const std::vector<Bf16>& got_k, const std::vector<Bf16>& got_v,
                   const Expected& want, Part layer1) {
    const size_t per_layer = static_cast<size_t>(capacity) * kv_dim;
    for (int l = 0; l < layers; ++l) {
      const bool patch = l == 1 && layer1 == Part::kPatch;
      INFO("layer " << l << (patch ? " (PATCH)" : " (REUSE)"));
      const double atol = patch ? 1e-4 : kBf16StoreAtol;
      const size_t at = l * per_layer;
      CheckCache(Slice(got_k, at, per_layer), Slice(want.k, at, per_layer),
                 Slice(want.written, at, per_layer), Slice(want.slack_k, at, per_layer), atol,
                 kBf16StoreRtol, "K cache");
      CheckCache(Slice(got_v, at, per_layer), Slice(want.v, at, per_layer),
                 Slice(want.written, at, per_layer), Slice(want.slack_v, at, per_layer), atol,
                 kBf16StoreRtol, "V cache");
    }
  };

  const std::vector<Bf16> sentinel(elems, cuda::FloatToBf16(kSentinel));
  DeviceArray<Bf16> k_cache(sentinel), v_cache(sentinel);
  auto rebuilder = cuda::ScdGpuRebuilder::Create(spec, 32);
  RequireOk(rebuilder.status());
  CHECK((*rebuilder)->weight_bytes() > 0);
  CHECK((*rebuilder)->max_tokens() == 32);
  CHECK((*rebuilder)->device_bytes() > (*rebuilder)->weight_bytes());
  CHECK((*rebuilder)->pinned_bytes() > 0);
  cuda::SequenceCache target;
  target.k = k_cache.get();
  target.v = v_cache.get();
  target.layer_stride = int64_t{capacity} * kv_dim;
  target.capacity = capacity;
  target.length = start;

  // Shape errors, which must leave the cache alone: codes for 2 of the 3 layers; positions
  // [36, 65) past a capacity of 64; 33 tokens, more than the rebuilder takes; a PATCH code for
  // layer 0, which has no aligner.
  CHECK_FALSE((*rebuilder)->Rebuild(absl::MakeConstSpan(codes.data(), 2), tokens, target).ok());
  cuda::SequenceCache overflow = target;
  overflow.length = capacity - tokens + 1;
  CHECK_FALSE((*rebuilder)->Rebuild(codes, tokens, overflow).ok());
  CHECK_FALSE((*rebuilder)->Rebuild(codes, 33, target).ok());
  std::vector<cuda::LayerCodes> no_aligner = codes;
  no_aligner[0] = {z_h[1].data(), nullptr, cuda::CodeFormat::kF32, Part::kPatch};
  const absl::Status refused = (*rebuilder)->Rebuild(no_aligner, tokens, target);
  INFO(refused);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.message()).find("no PATCH aligner") != std::string::npos);
  RequireSynced();
  CheckClose(Widen(k_cache.ToHost()), Widen(sentinel), 0, 0, "K cache after rejected calls");
  CheckClose(Widen(v_cache.ToHost()), Widen(sentinel), 0, 0, "V cache after rejected calls");

  cuda::RebuildTimes times;
  RequireOk((*rebuilder)->Rebuild(codes, tokens, target, &times));
  CHECK(times.total_ms > 0);
  CHECK(times.gpu_ms >= 0);
  CHECK(times.stage_ms >= 0);
  const std::vector<Bf16> got_k = k_cache.ToHost(), got_v = v_cache.ToHost();
  {
    INFO("layer 1 as PATCH");
    check(got_k, got_v, expect(Part::kPatch), Part::kPatch);
  }

  // The same rebuilder with layer 1 as REUSE (an scd-reuse payload), then as PATCH again: the
  // part is the call's, and a REUSE call leaves nothing behind for the next PATCH one.
  {
    INFO("layer 1 as REUSE");
    DeviceArray<Bf16> k_reuse(sentinel), v_reuse(sentinel);
    cuda::SequenceCache into = target;
    into.k = k_reuse.get();
    into.v = v_reuse.get();
    RequireOk((*rebuilder)->Rebuild(codes_for(Part::kReuse), tokens, into));
    check(k_reuse.ToHost(), v_reuse.ToHost(), expect(Part::kReuse), Part::kReuse);
    DeviceArray<Bf16> k_again(sentinel), v_again(sentinel);
    into.k = k_again.get();
    into.v = v_again.get();
    RequireOk((*rebuilder)->Rebuild(codes, tokens, into));
    CheckClose(Widen(k_again.ToHost()), Widen(got_k), 0, 0, "K cache, PATCH after REUSE");
    CheckClose(Widen(v_again.ToHost()), Widen(got_v), 0, 0, "V cache, PATCH after REUSE");
  }

  // The same rebuild from codes as they travel (F16, int8 with a scale per row), decoded on the
  // device: bit-identical to rebuilding from the host's decoding of those bytes as F32.
  for (const Encoding encoding : {Encoding::kF16, Encoding::kInt8Row}) {
    INFO("codes sent as " << EncodingName(encoding));
    std::vector<std::vector<uint8_t>> sent_k(layers), sent_v(layers);
    std::vector<std::vector<float>> host_k(layers), host_v(layers);
    std::vector<cuda::LayerCodes> sent(layers), host(layers);
    auto encode = [&](const float* z, int cols, std::vector<uint8_t>* bytes,
                      std::vector<float>* decoded) {
      bytes->resize(EncodedBytes(encoding, tokens, cols, 0));
      EncodeMatrix(encoding, z, tokens, cols, 0, bytes->data());
      decoded->resize(static_cast<size_t>(tokens) * cols);
      REQUIRE(DecodeMatrix(encoding, bytes->data(), bytes->size(), tokens, cols, 0, decoded->data())
                  .ok());
    };
    for (int l = 0; l < layers; ++l) {
      const cuda::RebuildLayerSpec& ls = spec.layers[l];
      const bool reuse = codes[l].part == Part::kReuse;
      encode(static_cast<const float*>(codes[l].z_k), reuse ? ls.rank_k : ls.code_dim, &sent_k[l],
             &host_k[l]);
      sent[l] = {sent_k[l].data(), nullptr, static_cast<cuda::CodeFormat>(encoding), codes[l].part};
      host[l] = {host_k[l].data(), nullptr, cuda::CodeFormat::kF32, codes[l].part};
      if (reuse) {
        encode(z_v[l].data(), ls.rank_v, &sent_v[l], &host_v[l]);
        sent[l].z_v = sent_v[l].data();
        host[l].z_v = host_v[l].data();
      }
    }
    DeviceArray<Bf16> k_sent(sentinel), v_sent(sentinel), k_host(sentinel), v_host(sentinel);
    cuda::SequenceCache into_sent = target, into_host = target;
    into_sent.k = k_sent.get();
    into_sent.v = v_sent.get();
    into_host.k = k_host.get();
    into_host.v = v_host.get();
    RequireOk((*rebuilder)->Rebuild(sent, tokens, into_sent));
    RequireOk((*rebuilder)->Rebuild(host, tokens, into_host));
    CheckClose(Widen(k_sent.ToHost()), Widen(k_host.ToHost()), 0, 0, "K cache, codes as sent");
    CheckClose(Widen(v_sent.ToHost()), Widen(v_host.ToHost()), 0, 0, "V cache, codes as sent");
  }

  // A spec layer with neither part is refused.
  cuda::RebuildSpec empty_layer = spec;
  empty_layer.layers[2] = cuda::RebuildLayerSpec{};
  const absl::Status bad = empty_layer.Validate();
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.message()).find("neither REUSE decoders nor a PATCH aligner") !=
        std::string::npos);
}

TEST_CASE("CUDA DecodeCodes matches DecodeMatrix bit for bit", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  // Odd shapes, a zero row (scale 0) and values that round to F16 subnormals.
  const int rows = 37, cols = 23;
  std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * cols, 901, 3.0f);
  for (int c = 0; c < cols; ++c) x[5 * cols + c] = 0.0f;
  for (int c = 0; c < cols; ++c) x[6 * cols + c] *= 1e-6f;
  for (const Encoding encoding : {Encoding::kF32, Encoding::kF16, Encoding::kInt8Row}) {
    INFO(EncodingName(encoding));
    const auto format = static_cast<cuda::CodeFormat>(encoding);
    std::vector<uint8_t> bytes(EncodedBytes(encoding, rows, cols, 0));
    REQUIRE(bytes.size() == cuda::CodeBytes(format, rows, cols));
    EncodeMatrix(encoding, x.data(), rows, cols, 0, bytes.data());
    std::vector<float> want(x.size());
    REQUIRE(DecodeMatrix(encoding, bytes.data(), bytes.size(), rows, cols, 0, want.data()).ok());
    DeviceArray<uint8_t> in(bytes);
    DeviceArray<float> out(x.size());
    RequireOk(cuda::DecodeCodes(in.get(), format, rows, cols, out.get(), nullptr));
    RequireSynced();
    CheckClose(out.ToHost(), want, 0, 0, "decoded codes");
  }
}

}  // namespace scd
