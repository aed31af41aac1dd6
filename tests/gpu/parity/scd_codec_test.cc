// Parity of SCD's consumer-side kernels (kernels/cuda/scd_sekv_ops.h, with
// CublasGemm::MatMulF32 under the PATCH aligner) and of ScdGpuRebuilder
// (kernels/cuda/scd_rebuilder.h) with their CPU twins on seeded random inputs; the SEKV
// kernels are sekv_kernels_test.cc's and sekv_zoom_test.cc's. Tolerances:
//   - F32 math whose summation order or libm differ: MatMulF32 and SiLU 1e-5 relative (+1e-5
//     and 1e-6 absolute); bias adds and BroadcastRow bit-exact;
//   - PatchAlignerForward (three GEMMs around a SiLU): 1e-4 relative + 1e-5 absolute;
//   - BF16 stores into the KV cache (REUSE decode, the rebuilder): one BF16 ulp, which is 2^-8
//     to 2^-7 of the stored value (2^-7 just above a power of two), so rtol 2^-7, plus 1e-5
//     absolute for values near zero whose F32 error exceeds their ulp. Slots not written must
//     keep their sentinel bit-exactly;
//   - the rebuilder's PATCH layers: the twin runs on the BF16-rounded Ĥ and [W_K; W_V] that the
//     device multiplies; where the F32 Ĥ lies within its error margin of a BF16 rounding
//     boundary the device may round it the other way, and that ulp times |W| is added to the
//     bound (atol 1e-4 for the BF16 GEMM's F32 accumulation).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "common/model/config.h"
#include "common/scd/patch_aligner.h"
#include "common/scd/quantize.h"
#include "common/scd/reduced_rank.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/scd_rebuilder.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "tests/gpu/parity/cuda_test_support.h"

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

namespace {

using Part = cuda::RebuildPart;

// The rebuilder's case: three layers, layer 0 REUSE only, layer 1 both (as a patched layer of
// an artifact's rebuilder: PATCH for scd payloads, REUSE for scd-reuse ones), layer 2 REUSE
// only; each part's random F32 codes for `tokens` positions from `start`; and what the CPU
// twins put into the cache.
struct RebuilderCase {
  const int hidden = 48, kv_heads = 2, head_dim = 16, kv_dim = kv_heads * head_dim;
  const int layers = 3, tokens = 29, start = 5, capacity = 64;
  const size_t elems = static_cast<size_t>(layers) * capacity * kv_dim;
  const PatchAligner aligner = RandomAligner(12, 20, hidden, 700);
  cuda::RebuildSpec spec;
  // The codes of each part: REUSE z_k/z_v, PATCH z_h.
  std::vector<std::vector<float>> z_k, z_v, z_h;
  std::vector<int32_t> positions;

  // The cache the CPU path fills. slack (PATCH only) bounds what a BF16 rounding of Ĥ the other
  // way can move.
  struct Expected {
    std::vector<float> k, v, slack_k, slack_v;
    std::vector<uint8_t> written;
  };

  RebuilderCase() : z_k(layers), z_v(layers), z_h(layers), positions(tokens) {
    spec.hidden_size = hidden;
    spec.num_kv_heads = kv_heads;
    spec.head_dim = head_dim;
    spec.inv_freq = HfInvFreq(head_dim);
    const int ranks[3][2] = {{8, 12}, {6, 10}, {5, 16}};
    uint64_t seed = 710;
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
    for (int t = 0; t < tokens; ++t) positions[t] = start + t;
  }

  // F32 codes of layer 1 as PATCH (the scd layout) or as REUSE (scd-reuse).
  std::vector<cuda::LayerCodes> Codes(Part layer1) const {
    std::vector<cuda::LayerCodes> codes(layers);
    for (int l = 0; l < layers; ++l) {
      const Part part = l == 1 ? layer1 : Part::kReuse;
      codes[l].part = part;
      codes[l].z_k = part == Part::kPatch ? z_h[l].data() : z_k[l].data();
      codes[l].z_v = part == Part::kPatch ? nullptr : z_v[l].data();
    }
    return codes;
  }

  Expected Expect(Part layer1) const {
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
        ExpectPatch(l, &k, &v, &ek, &ev);
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
  }

  // Layer l's K and V (before RoPE) by the PATCH path, with their slacks.
  void ExpectPatch(int l, std::vector<float>* k, std::vector<float>* v, std::vector<float>* ek,
                   std::vector<float>* ev) const {
    const cuda::RebuildLayerSpec& ls = spec.layers[l];
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
        (o < kv_dim ? *k : *v)[at] = kv[static_cast<size_t>(t) * 2 * kv_dim + o];
        (o < kv_dim ? *ek : *ev)[at] = e;
      }
    }
  }

  void Check(const std::vector<Bf16>& got_k, const std::vector<Bf16>& got_v, const Expected& want,
             Part layer1) const {
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
  }
};

// Shape errors, which must leave the cache alone: codes for 2 of the 3 layers; positions
// [36, 65) past a capacity of 64; 33 tokens, more than the rebuilder takes; a PATCH code for
// layer 0, which has no aligner.
void CheckRejectedCalls(cuda::ScdGpuRebuilder& rebuilder, const RebuilderCase& c,
                        const std::vector<cuda::LayerCodes>& codes,
                        const cuda::SequenceCache& target, const DeviceArray<Bf16>& k_cache,
                        const DeviceArray<Bf16>& v_cache, const std::vector<Bf16>& sentinel) {
  CHECK_FALSE(rebuilder.Rebuild(absl::MakeConstSpan(codes.data(), 2), c.tokens, target).ok());
  cuda::SequenceCache overflow = target;
  overflow.length = c.capacity - c.tokens + 1;
  CHECK_FALSE(rebuilder.Rebuild(codes, c.tokens, overflow).ok());
  CHECK_FALSE(rebuilder.Rebuild(codes, 33, target).ok());
  std::vector<cuda::LayerCodes> no_aligner = codes;
  no_aligner[0] = {c.z_h[1].data(), nullptr, cuda::CodeFormat::kF32, Part::kPatch};
  const absl::Status refused = rebuilder.Rebuild(no_aligner, c.tokens, target);
  INFO(refused);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(refused.message()).find("no PATCH aligner") != std::string::npos);
  RequireSynced();
  CheckClose(Widen(k_cache.ToHost()), Widen(sentinel), 0, 0, "K cache after rejected calls");
  CheckClose(Widen(v_cache.ToHost()), Widen(sentinel), 0, 0, "V cache after rejected calls");
}

// The same rebuild from codes as they travel (F16, int8 with a scale per row), decoded on the
// device: bit-identical to rebuilding from the host's decoding of those bytes as F32.
void CheckCodesAsSent(cuda::ScdGpuRebuilder& rebuilder, const RebuilderCase& c,
                      const std::vector<cuda::LayerCodes>& codes, const cuda::SequenceCache& target,
                      const std::vector<Bf16>& sentinel) {
  const int layers = c.layers, tokens = c.tokens;
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
      const cuda::RebuildLayerSpec& ls = c.spec.layers[l];
      const bool reuse = codes[l].part == Part::kReuse;
      encode(static_cast<const float*>(codes[l].z_k), reuse ? ls.rank_k : ls.code_dim, &sent_k[l],
             &host_k[l]);
      sent[l] = {sent_k[l].data(), nullptr, static_cast<cuda::CodeFormat>(encoding), codes[l].part};
      host[l] = {host_k[l].data(), nullptr, cuda::CodeFormat::kF32, codes[l].part};
      if (reuse) {
        encode(c.z_v[l].data(), ls.rank_v, &sent_v[l], &host_v[l]);
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
    RequireOk(rebuilder.Rebuild(sent, tokens, into_sent));
    RequireOk(rebuilder.Rebuild(host, tokens, into_host));
    CheckClose(Widen(k_sent.ToHost()), Widen(k_host.ToHost()), 0, 0, "K cache, codes as sent");
    CheckClose(Widen(v_sent.ToHost()), Widen(v_host.ToHost()), 0, 0, "V cache, codes as sent");
  }
}

}  // namespace

TEST_CASE("CUDA ScdGpuRebuilder matches the CPU REUSE and PATCH paths in the cache", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const RebuilderCase c;
  CHECK(!c.spec.layers[0].has_patch());
  CHECK(c.spec.layers[1].has_patch());
  CHECK(c.spec.layers[1].has_reuse());
  const std::vector<cuda::LayerCodes> codes = c.Codes(Part::kPatch);

  const std::vector<Bf16> sentinel(c.elems, cuda::FloatToBf16(kSentinel));
  DeviceArray<Bf16> k_cache(sentinel), v_cache(sentinel);
  auto rebuilder = cuda::ScdGpuRebuilder::Create(c.spec, 32);
  RequireOk(rebuilder.status());
  CHECK((*rebuilder)->weight_bytes() > 0);
  CHECK((*rebuilder)->max_tokens() == 32);
  CHECK((*rebuilder)->device_bytes() > (*rebuilder)->weight_bytes());
  CHECK((*rebuilder)->pinned_bytes() > 0);
  cuda::SequenceCache target;
  target.k = k_cache.get();
  target.v = v_cache.get();
  target.layer_stride = int64_t{c.capacity} * c.kv_dim;
  target.capacity = c.capacity;
  target.length = c.start;
  CheckRejectedCalls(**rebuilder, c, codes, target, k_cache, v_cache, sentinel);

  cuda::RebuildTimes times;
  RequireOk((*rebuilder)->Rebuild(codes, c.tokens, target, &times));
  CHECK(times.total_ms > 0);
  CHECK(times.gpu_ms >= 0);
  CHECK(times.stage_ms >= 0);
  const std::vector<Bf16> got_k = k_cache.ToHost(), got_v = v_cache.ToHost();
  {
    INFO("layer 1 as PATCH");
    c.Check(got_k, got_v, c.Expect(Part::kPatch), Part::kPatch);
  }

  // The same rebuilder with layer 1 as REUSE (an scd-reuse payload), then as PATCH again: the
  // part is the call's, and a REUSE call leaves nothing behind for the next PATCH one.
  {
    INFO("layer 1 as REUSE");
    DeviceArray<Bf16> k_reuse(sentinel), v_reuse(sentinel);
    cuda::SequenceCache into = target;
    into.k = k_reuse.get();
    into.v = v_reuse.get();
    RequireOk((*rebuilder)->Rebuild(c.Codes(Part::kReuse), c.tokens, into));
    c.Check(k_reuse.ToHost(), v_reuse.ToHost(), c.Expect(Part::kReuse), Part::kReuse);
    DeviceArray<Bf16> k_again(sentinel), v_again(sentinel);
    into.k = k_again.get();
    into.v = v_again.get();
    RequireOk((*rebuilder)->Rebuild(codes, c.tokens, into));
    CheckClose(Widen(k_again.ToHost()), Widen(got_k), 0, 0, "K cache, PATCH after REUSE");
    CheckClose(Widen(v_again.ToHost()), Widen(got_v), 0, 0, "V cache, PATCH after REUSE");
  }
  CheckCodesAsSent(**rebuilder, c, codes, target, sentinel);

  // A spec layer with neither part is refused.
  cuda::RebuildSpec empty_layer = c.spec;
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
