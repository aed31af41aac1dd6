// Parity of the GPU SEKV decode (common/sekv/gpu_sekv.h: the GPU tier mirrored on the device,
// the planning and the CPU tier on the host, the model through Backend::DecodeMixed) with
// the CPU path.
//   - One layer's attention, GpuSekv::Attend against SekvCache::Attend on an identical cache
//     and identical F32 inputs: the device computes what the host computes, in another order,
//     so 1e-4 relative + 1e-5 absolute (SekvAttention's bound in sekv_kernels_test). The gate's α
//     and the resident log-sum-exp come from the device, so a selection could differ where an
//     α lies within float rounding of τ; the random-router cases run few steps, and the long
//     runs use selections that cannot flip (summaries only; every token expanded).
//     The BF16 tier (the default) gets BF16 inputs, as the backend's KV cache holds them, and
//     runs the cases where no selection can flip on rounding: with every token expanded it
//     must agree as closely as the F32 tier (no summary is read, every other row is exact in
//     BF16); with summaries only, whose means are rounded on the device alone, within 3e-2
//     absolute and relative (tests/gpu/standin/gpu_sekv_host_test.cc derives and measures it).
//   - Whole-model decode of stories260K: GpuSekv::Step against SekvDecoder::Step (CPU model,
//     CPU SEKV cache) and against the CUDA backend's own full-KV decode, with backend_test's
//     CPU-vs-CUDA logit bounds (0.6 max abs, 0.06 mean abs): the device path differs by its
//     BF16 weights (and in the BF16 tier by its BF16 rows, as the backend's KV cache), as the
//     CUDA backend does. The logits are compared less their mean, which the softmax ignores.
//     The BF16 tier's extra rounding of every row moves a layer's attention output by 1-3%
//     against the F32 tier's on the same q/k/v (stories260K's scores are large), and the
//     logits of one of the 8 steps by up to mean |d| 0.051 (stand-ins) / 0.046 (emulator)
//     after centring; the F32 tier stays under 0.02.
#include "common/sekv/gpu_sekv.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/runtime/backend.h"
#include "common/runtime/cuda/op_profiling.h"
#include "common/runtime/cuda/synthetic_backend.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/sekv_decoder.h"
#include "common/sekv/zoom_router.h"
#include "kernels/cuda/device_memory.h"
#include "tests/gpu/parity/cuda_test_support.h"
#include "tests/sekv/sekv_test_support.h"

namespace scd::sekv {
namespace {

using testing::CheckClose;
using testing::DeviceArray;
using testing::RandomFloats;

using testing::kLogitMaxAbs;
using testing::kLogitMeanAbs;

// The logits less their mean (the same distribution after the softmax).
std::vector<float> Centred(std::vector<float> x) {
  double sum = 0;
  for (float f : x) sum += f;
  const float mean = x.empty() ? 0.0f : static_cast<float>(sum / x.size());
  for (float& f : x) f -= mean;
  return x;
}

struct Tolerance {
  double atol, rtol;
};
constexpr Tolerance kF32Tier{1e-5, 1e-4}, kBf16Tier{3e-2, 3e-2};

// `t` positions of random K/V per layer, surprisal 1.
PrefixKv UnitSurprisalPrefix(const CacheShape& shape, int t) {
  PrefixKv prefix;
  prefix.num_tokens = t;
  for (int l = 0; l < shape.num_layers; ++l) {
    prefix.k.push_back(RandomFloats(static_cast<size_t>(t) * shape.kv_dim(), l));
    prefix.v.push_back(RandomFloats(static_cast<size_t>(t) * shape.kv_dim(), 50 + l));
  }
  prefix.surprisal.assign(t, 1.0f);
  return prefix;
}

// One zoom of CompareLayerAttention (below).
void CompareLayerAttention(Backend& backend, const CacheShape& shape, const PrefixKv& prefix,
                           const Segmentation& seg, const SekvOptions& o,
                           std::shared_ptr<const ZoomRouter> router, int steps, GpuTier tier,
                           Tolerance tol, int window_slack, GpuZoom zoom) {
  const bool bf16 = tier == GpuTier::kBf16;
  auto rounded = [bf16](const std::vector<float>& x) { return bf16 ? testing::RoundedBf16(x) : x; };
  PrefixKv input = prefix;
  for (auto& x : input.k) x = rounded(x);
  for (auto& x : input.v) x = rounded(x);
  auto host = SekvCache::CreateWithSegmentation(shape, input, seg, o, router);
  auto mirrored = SekvCache::CreateWithSegmentation(shape, input, seg, o, router);
  REQUIRE(host.ok());
  REQUIRE(mirrored.ok());
  auto gpu = GpuSekv::Create(backend, **mirrored, tier, zoom, window_slack);
  INFO(gpu.status());
  REQUIRE(gpu.ok());
  auto stream = cuda::Stream::Create();
  REQUIRE(stream.ok());
  DeviceArray<float> q(shape.q_dim()), k(shape.kv_dim()), v(shape.kv_dim()), out(shape.q_dim());
  for (int step = 0; step < steps; ++step) {
    for (int l = 0; l < shape.num_layers; ++l) {
      const uint64_t seed = 1000 + 16 * step + l;
      const std::vector<float> hq = RandomFloats(shape.q_dim(), seed, 2.0f);
      const std::vector<float> hk = rounded(RandomFloats(shape.kv_dim(), seed + 1, 2.0f));
      const std::vector<float> hv = rounded(RandomFloats(shape.kv_dim(), seed + 2));
      testing::RequireOk(cuda::CopyToDeviceSync(q.get(), hq.data(), sizeof(float) * hq.size()));
      testing::RequireOk(cuda::CopyToDeviceSync(k.get(), hk.data(), sizeof(float) * hk.size()));
      testing::RequireOk(cuda::CopyToDeviceSync(v.get(), hv.data(), sizeof(float) * hv.size()));
      std::vector<float> want(shape.q_dim());
      (*host)->Attend(l, hq.data(), hk.data(), hv.data(), want.data());
      testing::RequireOk(
          (*gpu)->Attend(l, q.get(), k.get(), v.get(), out.get(), (*stream)->handle()));
      testing::RequireOk((*stream)->Synchronize());
      CheckClose(out.ToHost(), want, tol.atol, tol.rtol,
                 "step " + std::to_string(step) + " layer " + std::to_string(l));
    }
  }
  testing::RequireOk((*gpu)->Settle((*stream)->handle()));
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

// Runs `steps` decode steps of random q/k/v through a host SekvCache and a GpuSekv over an
// identical one, comparing every layer's output, once with each zoom (device, host).
void CompareLayerAttention(Backend& backend, const CacheShape& shape, const PrefixKv& prefix,
                           const Segmentation& seg, const SekvOptions& o,
                           std::shared_ptr<const ZoomRouter> router, int steps,
                           GpuTier tier = GpuTier::kF32, Tolerance tol = kF32Tier,
                           int window_slack = GpuSekv::kDefaultWindowSlack) {
  for (const GpuZoom zoom : {GpuZoom::kDevice, GpuZoom::kHost}) {
    INFO((zoom == GpuZoom::kDevice ? "device zoom" : "host zoom"));
    CompareLayerAttention(backend, shape, prefix, seg, o, router, steps, tier, tol, window_slack,
                          zoom);
  }
}

}  // namespace

TEST_CASE("GpuSekv layer attention matches SekvCache::Attend", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  auto model = testing::LoadSharedModel("models/stories260K");
  auto backend = testing::MakeBackend(BackendKind::kCuda, model);
  const CacheShape shape = CacheShape::FromConfig(model->config);
  const int t = 120;
  PrefixKv prefix;
  prefix.num_tokens = t;
  for (int l = 0; l < shape.num_layers; ++l) {
    prefix.k.push_back(RandomFloats(static_cast<size_t>(t) * shape.kv_dim(), 10 + l, 2.0f));
    prefix.v.push_back(RandomFloats(static_cast<size_t>(t) * shape.kv_dim(), 20 + l));
  }
  prefix.surprisal = RandomFloats(t, 5, 3.0f);
  for (float& s : prefix.surprisal) s = std::fabs(s);
  const Segmentation seg = testing::ChunkedSegmentation(t, 7, 10, {0, 17});
  SekvOptions o;
  o.async_fetch = true;

  SECTION("calibrated-style router: token zoom with pins") {
    o.pin_tokens = 4;
    o.expand_budget = 6;
    CompareLayerAttention(*backend, shape, prefix, seg, o, testing::RandomRouter(shape), 4);
  }
  SECTION("calibrated-style router: span zoom") {
    o.resolution = ZoomResolution::kSpan;
    o.expand_budget = 10;
    CompareLayerAttention(*backend, shape, prefix, seg, o, testing::RandomRouter(shape), 4);
  }
  SECTION("default router, small expansion buffer") {
    o.expand_budget = 2;
    CompareLayerAttention(*backend, shape, prefix, seg, o, nullptr, 4);
  }
  // Both tiers where no selection can flip on BF16 rounding; with every token expanded no
  // summary is read, so the BF16 tier agrees as closely as the F32 tier.
  // The window's 10 rows with 3 rows' slack outgrow the device buffer at the 4th step (14
  // rows), which then holds 2 x 14 + 3 rows, and again at 32 and 68 rows: 3 times in 80 steps
  // (the default slack, 256, would take 257 steps for the first).
  SECTION("summaries only, 80 steps: the device window grows 3 times") {
    o.zoom = false;
    const int slack = 3;
    CompareLayerAttention(*backend, shape, prefix, seg, o, nullptr, 80, GpuTier::kF32, kF32Tier,
                          slack);
    CompareLayerAttention(*backend, shape, prefix, seg, o, nullptr, 80, GpuTier::kBf16, kBf16Tier,
                          slack);
  }
  SECTION("every token expanded, with pins: equals full attention") {
    o.store.energy = 1.0;
    o.expand_budget = t;
    o.tau_override = 0.0f;
    o.pin_tokens = 3;
    CompareLayerAttention(*backend, shape, prefix, seg, o, nullptr, 20);
    CompareLayerAttention(*backend, shape, prefix, seg, o, nullptr, 20, GpuTier::kBf16, kF32Tier);
  }
}

namespace {

// stories260K on the CUDA backend, with its SEKV decoder and a CPU backend that prefills the
// prompts.
struct SekvModel {
  SekvModel() {
    auto created = SekvDecoder::Create(model);
    REQUIRE(created.ok());
    decoder = std::move(created).value();
  }
  // BOS, then `n - 1` seeded tokens of the base vocabulary.
  std::vector<int32_t> Prompt(int n, uint64_t seed) const {
    std::vector<int32_t> p = testing::RandomInts(n, seed, model->config.vocab_size - 3);
    for (int32_t& x : p) x += 3;
    p.front() = 1;
    return p;
  }
  // The K/V and surprisal of prompt[0, length) from the CPU prefill (the session's step 1-2).
  PrefixKv Prefix(const std::vector<int32_t>& prompt, int length) const {
    auto seq = cpu->NewSequence(length).value();
    PrefillOptions po;
    po.layer_states = po.surprisal = true;
    PrefillResult pr;
    testing::RequireOk(cpu->Prefill(*seq, absl::MakeConstSpan(prompt).first(length), po, &pr));
    auto prefix = decoder->MakePrefix(pr.layers, length, pr.surprisal);
    REQUIRE(prefix.ok());
    return std::move(prefix).value();
  }

  std::shared_ptr<const Model> model = testing::LoadSharedModel("models/stories260K");
  std::unique_ptr<Backend> cpu = testing::MakeBackend(BackendKind::kCpu, model);
  std::unique_ptr<Backend> gpu = testing::MakeBackend(BackendKind::kCuda, model);
  std::unique_ptr<SekvDecoder> decoder;
};

// An 80-token prompt, its prefix, and 8 tokens to decode after it.
struct DecodeInputs {
  explicit DecodeInputs(const SekvModel& m)
      : prompt(m.Prompt(80, 3)),
        next(testing::RandomInts(8, 4, m.model->config.vocab_size - 3)),
        prefix(m.Prefix(prompt, static_cast<int>(prompt.size()))) {
    for (int32_t& x : next) x += 3;
  }
  int t() const { return static_cast<int>(prompt.size()); }

  std::vector<int32_t> prompt, next;
  PrefixKv prefix;
};

// One GpuSekv step, profiled (cuda::SetOpProfiling): GpuSekv marks its parts of each layer's
// attention. Its logits.
std::vector<float> ProfiledStep(SekvModel& m, GpuSekv& gpu, int32_t token, int position,
                                bool zoom) {
  std::vector<float> got;
  testing::RequireOk(cuda::SetOpProfiling(*m.gpu, true));
  testing::RequireOk(gpu.Step(token, position, &got));
  const absl::StatusOr<cuda::OpProfile> p = cuda::TakeOpProfile(*m.gpu);
  testing::RequireOk(cuda::SetOpProfiling(*m.gpu, false));
  REQUIRE(p.ok());
  const int64_t layers = m.model->config.num_layers;
  auto ops = [&](cuda::OpClass c) { return p->ops[static_cast<int>(c)]; };
  CHECK(p->passes == 1);
  CHECK(ops(cuda::OpClass::kSekvGate) == (zoom ? layers : 0));
  CHECK(ops(cuda::OpClass::kSekvZoom) == layers);  // the zoom-in, or the counts alone
  CHECK(ops(cuda::OpClass::kSekvResident) == layers);
  CHECK(ops(cuda::OpClass::kAttention) == 2 * layers);  // before the gate; the merge
  CHECK(ops(cuda::OpClass::kQkv) == layers);
  return got;
}

// Decodes `in.next` through a host SekvCache and a GpuSekv over an identical one: the logits
// agree at every step, and with the CUDA backend's own full-KV decode when `against_full`.
void CompareWholeModelDecode(SekvModel& m, const DecodeInputs& in, const SekvOptions& o,
                             bool against_full, GpuTier tier, GpuZoom zoom = GpuZoom::kDevice) {
  auto host = SekvCache::Create(m.decoder->shape(), in.prefix, o, nullptr);
  auto mirrored = SekvCache::Create(m.decoder->shape(), in.prefix, o, nullptr);
  REQUIRE(host.ok());
  REQUIRE(mirrored.ok());
  auto gpu = GpuSekv::Create(*m.gpu, **mirrored, tier, zoom);
  INFO(gpu.status());
  REQUIRE(gpu.ok());
  std::unique_ptr<Sequence> full;
  if (against_full) {
    full = m.gpu->NewSequence(in.t() + static_cast<int>(in.next.size())).value();
    PrefillResult ignored;
    testing::RequireOk(m.gpu->Prefill(*full, in.prompt, PrefillOptions{}, &ignored));
  }
  for (size_t i = 0; i < in.next.size(); ++i) {
    const int position = in.t() + static_cast<int>(i);
    std::vector<float> want;
    testing::RequireOk(m.decoder->Step(in.next[i], position, **host, &want));
    const std::vector<float> got = ProfiledStep(m, **gpu, in.next[i], position, o.zoom);
    testing::CheckLogits(Centred(got), Centred(want), kLogitMaxAbs, kLogitMeanAbs,
                         "GPU SEKV vs CPU SEKV, step " + std::to_string(i));
    if (against_full) {
      std::vector<float> reference;
      Sequence* seqs[] = {full.get()};
      testing::RequireOk(m.gpu->Decode(seqs, {&in.next[i], 1}, &reference));
      testing::CheckLogits(Centred(got), Centred(reference), kLogitMaxAbs, kLogitMeanAbs,
                           "GPU SEKV vs CUDA full KV, step " + std::to_string(i));
    }
  }
}

}  // namespace

TEST_CASE("GPU SEKV decode of stories260K follows the CPU SEKV decode and the full cache",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  SekvModel m;
  const DecodeInputs in(m);
  for (const GpuTier tier : {GpuTier::kF32, GpuTier::kBf16}) {
    const std::string name = tier == GpuTier::kF32 ? "F32 tier: " : "BF16 tier: ";
    SECTION(name + "every token expanded (lossless bases): the full cache's logits") {
      SekvOptions o;
      o.store.energy = 1.0;
      o.expand_budget = in.t();
      o.tau_override = 0.0f;
      CompareWholeModelDecode(m, in, o, /*against_full=*/true, tier);
      CompareWholeModelDecode(m, in, o, /*against_full=*/true, tier, GpuZoom::kHost);
    }
    SECTION(name + "summaries only") {
      SekvOptions o;
      o.zoom = false;
      CompareWholeModelDecode(m, in, o, /*against_full=*/false, tier);
    }
  }
}

namespace {

// SEKV caches of prefixes under `o`, each with its BF16 mirror on `backend`, of the zoom given
// beside it.
struct Mirrors {
  void Add(Backend& backend, const SekvModel& m, const std::vector<PrefixKv>& prefixes,
           const std::vector<GpuZoom>& zooms, const SekvOptions& o) {
    for (size_t r = 0; r < prefixes.size(); ++r) {
      auto c = SekvCache::Create(m.decoder->shape(), prefixes[r], o, nullptr);
      REQUIRE(c.ok());
      caches.push_back(std::move(c).value());
      auto mirror = GpuSekv::Create(backend, *caches.back(), GpuTier::kBf16, zooms[r]);
      testing::RequireOk(mirror.status());
      mirrors.push_back(std::move(mirror).value());
    }
  }

  std::vector<std::unique_ptr<SekvCache>> caches;
  std::vector<std::unique_ptr<GpuSekv>> mirrors;
};

// Three prompts of different lengths, 6 tokens to decode after each, and their prefixes.
struct ThreePrompts {
  explicit ThreePrompts(const SekvModel& m) {
    for (int r = 0; r < 3; ++r) {
      prompts.push_back(m.Prompt(lengths[r] + 6, 10 + r));
      prefixes.push_back(m.Prefix(prompts.back(), lengths[r]));
    }
  }
  const int lengths[3] = {60, 90, 75};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<PrefixKv> prefixes;
};

// Each prompt in two identical caches under `o`, one mirror stepped alone and one in
// GpuSekv::StepBatch with the others: every row of the batch gets its own step.
void CheckBatchAgainstAlone(SekvModel& m, const ThreePrompts& p, const SekvOptions& o) {
  const std::vector<GpuZoom> zooms = {GpuZoom::kDevice, GpuZoom::kHost, GpuZoom::kDevice};
  Mirrors set;  // [alone 0..2, batched 0..2]
  set.Add(*m.gpu, m, p.prefixes, zooms, o);
  set.Add(*m.gpu, m, p.prefixes, zooms, o);
  GpuSekv* const batch[] = {set.mirrors[3].get(), set.mirrors[4].get(), set.mirrors[5].get()};
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> tokens;
    std::vector<int> positions;
    for (int r = 0; r < 3; ++r) {
      tokens.push_back(p.prompts[r][p.lengths[r] + i]);
      positions.push_back(p.lengths[r] + i);
    }
    std::vector<std::vector<float>> together;
    testing::RequireOk(GpuSekv::StepBatch(batch, tokens, positions, &together));
    REQUIRE(together.size() == 3);
    for (int r = 0; r < 3; ++r) {
      std::vector<float> alone;
      testing::RequireOk(set.mirrors[r]->Step(tokens[r], positions[r], &alone));
      testing::CheckLogits(
          Centred(together[r]), Centred(alone), kLogitMaxAbs, kLogitMeanAbs,
          "row " + std::to_string(r) + " of the batch vs alone, step " + std::to_string(i));
    }
  }
  for (int r = 0; r < 3; ++r) {  // the host caches took the same rows, and zoomed alike
    CHECK(set.caches[3 + r]->Memory().window == set.caches[r]->Memory().window);
    CHECK(set.caches[3 + r]->zoom_stats().expanded_tokens ==
          set.caches[r]->zoom_stats().expanded_tokens);
  }
  // A batch refuses mismatched inputs before it runs.
  std::vector<std::vector<float>> none;
  const int32_t two_tokens[] = {5, 6};
  const int one_position[] = {p.lengths[0] + 6};
  CHECK(GpuSekv::StepBatch(absl::MakeConstSpan(batch, 2), two_tokens, one_position, &none).code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace

TEST_CASE("GPU SEKV mirrors stepped as one batch give each mirror's own step", "[cuda]") {
  // Three prompts of different lengths; each has two identical caches, one mirror stepped
  // alone and one in GpuSekv::StepBatch with the others (rows at different positions, the
  // device and the host zoom in one batch). Every token is expanded with lossless bases, or
  // there are summaries only, so no selection can flip on the GEMM's rounding, which differs
  // between a batch and a single row (cuBLAS, or the stand-ins' BLAS, may pick another
  // algorithm). The F32 difference is ~1e-6, but the backend rounds each layer's activations
  // to BF16 before its GEMMs, and a rounding that flips moves stories260K's logits by up to a
  // few 1e-2 (measured on the stand-ins: mean |d| up to 0.012 in the BF16 tier); hence
  // backend_test's bounds. A row given another row's attention is off by far more.
  SCD_SKIP_WITHOUT_CUDA();
  SekvModel m;
  const ThreePrompts prompts(m);
  SECTION("every token expanded (lossless bases)") {
    SekvOptions o;
    o.store.energy = 1.0;
    o.expand_budget = 90;
    o.tau_override = 0.0f;
    CheckBatchAgainstAlone(m, prompts, o);
  }
  SECTION("summaries only") {
    SekvOptions o;
    o.zoom = false;
    CheckBatchAgainstAlone(m, prompts, o);
  }
}

namespace {

constexpr int kMixedSteps = 5;

// Prompt 0 in two backend sequences (the mixed step's, then its twin), prompts 1 and 2 in
// mirrors (the mixed step's, then each one's twin), every token expanded with lossless bases.
struct MixedStepSetup {
  explicit MixedStepSetup(SekvModel& m) {
    for (int r = 0; r < 3; ++r) prompts.push_back(m.Prompt(lengths[r] + kMixedSteps, 30 + r));
    for (int set = 0; set < 2; ++set) {
      seqs.push_back(m.gpu->NewSequence(lengths[0] + kMixedSteps).value());
      PrefillResult pr;
      testing::RequireOk(
          m.gpu->Prefill(*seqs.back(), absl::MakeConstSpan(prompts[0]).first(lengths[0]), {}, &pr));
    }
    SekvOptions o;
    o.store.energy = 1.0;
    o.expand_budget = 90;
    o.tau_override = 0.0f;
    for (int set = 0; set < 2; ++set) {  // [mixed 1, 2, alone 1, 2]
      const std::vector<PrefixKv> prefixes = {m.Prefix(prompts[1], lengths[1]),
                                              m.Prefix(prompts[2], lengths[2])};
      mirrors.Add(*m.gpu, m, prefixes, {GpuZoom::kDevice, GpuZoom::kHost}, o);
    }
  }

  const int lengths[3] = {50, 80, 65};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::unique_ptr<Sequence>> seqs;
  Mirrors mirrors;
};

// kMixedSteps mixed steps: the sequence's token is its twin's greedy pick, or one within the
// rounding of it, and each mirror's logits are its twin's stepped alone.
void CheckMixedSteps(SekvModel& m, MixedStepSetup& f) {
  Sequence* const step_seqs[] = {f.seqs[0].get()};
  Sequence* const twin[] = {f.seqs[1].get()};
  GpuSekv* const step_mirrors[] = {f.mirrors.mirrors[0].get(), f.mirrors.mirrors[1].get()};
  const SampleDraw greedy[] = {SampleDraw{}};
  for (int i = 0; i < kMixedSteps; ++i) {
    const int32_t seq_token[] = {f.prompts[0][f.lengths[0] + i]};
    const int32_t tokens[] = {f.prompts[1][f.lengths[1] + i], f.prompts[2][f.lengths[2] + i]};
    const int positions[] = {f.lengths[1] + i, f.lengths[2] + i};
    std::vector<int32_t> next;
    std::vector<std::vector<float>> logits;
    testing::RequireOk(GpuSekv::StepMixed(*m.gpu, step_seqs, seq_token, greedy, &next, step_mirrors,
                                          tokens, positions, &logits));
    REQUIRE(next.size() == 1);
    REQUIRE(logits.size() == 2);
    std::vector<float> ref;
    testing::RequireOk(m.gpu->Decode(twin, seq_token, &ref));
    const float best = *std::max_element(ref.begin(), ref.end());
    CHECK(ref[next[0]] >= best - 0.05f);
    CHECK(f.seqs[0]->length() == f.seqs[1]->length());
    for (int r = 0; r < 2; ++r) {
      std::vector<float> alone;
      testing::RequireOk(f.mirrors.mirrors[2 + r]->Step(tokens[r], positions[r], &alone));
      testing::CheckLogits(
          Centred(logits[r]), Centred(alone), kLogitMaxAbs, kLogitMeanAbs,
          "mirror " + std::to_string(r) + " of the mixed step vs alone, step " + std::to_string(i));
    }
  }
  for (int r = 0; r < 2; ++r) {  // the host caches took the same rows
    CHECK(f.mirrors.caches[r]->Memory().window == f.mirrors.caches[2 + r]->Memory().window);
  }
}

}  // namespace

TEST_CASE(
    "GPU SEKV mirrors stepped with the backend's own sequences (StepMixed) give each row its own "
    "step",
    "[cuda]") {
  // Prompt 0 in a backend sequence (a twin decoded alone beside it), prompts 1 and 2 in
  // mirrors (each with a twin stepped alone), every token expanded with lossless bases so that
  // no selection flips on the GEMM's rounding (see the batch test above for the bounds).
  SCD_SKIP_WITHOUT_CUDA();
  SekvModel m;
  MixedStepSetup f(m);
  GpuSekv* const step_mirrors[] = {f.mirrors.mirrors[0].get(), f.mirrors.mirrors[1].get()};
  CHECK(step_mirrors[0]->OnBackend(*m.gpu));
  CHECK(!step_mirrors[0]->OnBackend(*m.cpu));
  const int64_t eager_before = m.gpu->decode_graph_stats().eager_steps;
  CheckMixedSteps(m, f);
  // A mixed step runs eagerly (its attention waits on the host); the twin's steps may replay.
  CHECK(m.gpu->decode_graph_stats().eager_steps >= eager_before + kMixedSteps);
  // A mirror of another backend is refused before anything runs.
  auto other = testing::MakeBackend(BackendKind::kCuda, m.model);
  std::vector<int32_t> next;
  std::vector<std::vector<float>> logits;
  const int32_t tokens[] = {5, 6};
  const int positions[] = {f.lengths[1] + kMixedSteps, f.lengths[2] + kMixedSteps};
  CHECK(GpuSekv::StepMixed(*other, {}, {}, {}, &next, step_mirrors, tokens, positions, &logits)
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.seqs[0]->length() == f.lengths[0] + kMixedSteps);
}

TEST_CASE("GpuSekv reads a CPU tier mapped ahead on another thread, as one it maps itself",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  auto model = testing::LoadSharedModel("models/stories260K");
  auto backend = testing::MakeBackend(BackendKind::kCuda, model);
  const CacheShape shape = CacheShape::FromConfig(model->config);
  const int t = 90;
  const PrefixKv prefix = UnitSurprisalPrefix(shape, t);
  const Segmentation seg = testing::ChunkedSegmentation(t, 7, 6, {0});
  SekvOptions o;
  o.expand_budget = 12;
  o.tau_override = 0.0f;  // every layer zooms at every step
  auto new_cache = [&] {
    auto cache = SekvCache::CreateWithSegmentation(shape, prefix, seg, o, nullptr);
    REQUIRE(cache.ok());
    return std::move(cache).value();
  };
  // Three steps' logits of a mirror of a fresh cache, mapped ahead when `ahead`.
  auto decode = [&](bool ahead) {
    const std::unique_ptr<SekvCache> cache = new_cache();
    std::unique_ptr<CpuTierMapping> mapping;
    if (ahead) {  // as the decode engine's build thread does
      absl::Status mapped;
      std::thread([&] {
        auto m = GpuSekv::MapCpuTier(*backend, *cache);
        mapped = m.status();
        if (m.ok()) mapping = std::move(m).value();
      }).join();
      testing::RequireOk(mapped);
      CHECK(mapping->error().ok());
      CHECK(&mapping->cache() == cache.get());
      // A mapping belongs to its cache.
      const std::unique_ptr<SekvCache> other = new_cache();
      auto refused = GpuSekv::Create(*backend, *other, GpuTier::kF32, GpuZoom::kDevice,
                                     GpuSekv::kDefaultWindowSlack, mapping.get());
      CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
    }
    auto gpu = GpuSekv::Create(*backend, *cache, GpuTier::kF32, GpuZoom::kDevice,
                               GpuSekv::kDefaultWindowSlack, mapping.get());
    testing::RequireOk(gpu.status());
    // In place: registered, or read through the host's page tables; never a copy.
    CHECK((*gpu)->cpu_tier_access() != CpuTierAccess::kPinnedCopy);
    CHECK((*gpu)->registration_error().ok());
    std::vector<float> all, logits;
    for (int i = 0; i < 3; ++i) {
      testing::RequireOk((*gpu)->Step(5 + 11 * i, t + i, &logits));
      all.insert(all.end(), logits.begin(), logits.end());
    }
    CHECK(cache->zoom_stats().expanded_tokens > 0);
    return all;
  };
  const std::vector<float> ahead = decode(true), own = decode(false);
  CHECK(ahead == own);
}

TEST_CASE("GpuSekv refuses a cache of another model", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  auto model = testing::LoadSharedModel("models/stories260K");
  auto backend = testing::MakeBackend(BackendKind::kCuda, model);
  CacheShape shape = CacheShape::FromConfig(model->config);
  shape.num_layers += 1;
  const int t = 40;
  const PrefixKv prefix = UnitSurprisalPrefix(shape, t);
  auto cache = SekvCache::CreateWithSegmentation(
      shape, prefix, testing::ChunkedSegmentation(t, 7, 6, {0}), SekvOptions{}, nullptr);
  REQUIRE(cache.ok());
  auto gpu = GpuSekv::Create(*backend, **cache);
  REQUIRE(!gpu.ok());
  CHECK(gpu.status().message().find("does not match") != std::string::npos);
}

TEST_CASE("GpuSekv's device zoom refuses bases of too high a rank; the host zoom takes them",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  ModelConfig config = testing::ParityConfig(Architecture::kLlama);
  config.head_dim = 128;  // so that a span of 70 random tokens has rank 70
  auto backend = cuda::CreateSyntheticCudaBackend(config, 7);
  INFO(backend.status());
  REQUIRE(backend.ok());
  const CacheShape shape = CacheShape::FromConfig(config);
  const int t = 80;
  const PrefixKv prefix = UnitSurprisalPrefix(shape, t);
  const Segmentation seg = testing::ChunkedSegmentation(t, 70, 5, {0});
  auto check = [&](const SekvOptions& o, const std::string& want) {
    auto cache = SekvCache::CreateWithSegmentation(shape, prefix, seg, o, nullptr);
    REQUIRE(cache.ok());
    auto device = GpuSekv::Create(**backend, **cache, GpuTier::kBf16, GpuZoom::kDevice);
    REQUIRE(!device.ok());
    CHECK(device.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(device.status().message().find(want) != std::string::npos);
    INFO(device.status());
    auto host = GpuSekv::Create(**backend, **cache, GpuTier::kBf16, GpuZoom::kHost);
    INFO(host.status());
    CHECK(host.ok());
  };
  SekvOptions o;
  o.store.r_max = 70;  // spans of 70 random tokens keep up to rank 64 + 6
  o.store.energy = 1.0;
  check(o, "rank at most 64");
}

}  // namespace scd::sekv
