// SEKV decode path: the decoder against the CPU backend, the hierarchy against the full cache
// when everything is expanded (token and whole-span zoom-in), asynchronous against inline
// fetches, the router calibration fit, the artifact round trip, and the baselines.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "common/base/random.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/chunk_cache.h"
#include "common/sekv/h2o_cache.h"
#include "common/sekv/kv_cache.h"
#include "common/sekv/sekv_artifact.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/sekv_calibration.h"
#include "common/sekv/sekv_decoder.h"
#include "tests/test_support.h"

namespace scd::sekv {
namespace {

std::shared_ptr<const Model> TinyModel() {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.vocab_size = 64;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = true;
  c.name = "tiny";
  REQUIRE(c.Validate().ok());
  return MakeSyntheticModel(c, 5, 0.3f);
}

std::vector<int32_t> Tokens(int n, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int32_t> ids = {1};
  while (static_cast<int>(ids.size()) < n)
    ids.push_back(3 + static_cast<int32_t>(rng.NextBelow(60)));
  return ids;
}

struct Prefilled {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Sequence> seq;
  PrefixKv prefix;
};

Prefilled Prefill(std::shared_ptr<const Model> model, SekvDecoder& dec,
                  const std::vector<int32_t>& ids, int p) {
  Prefilled out;
  auto b = CreateBackend(BackendKind::kCpu, model);
  REQUIRE(b.ok());
  out.backend = std::move(b).value();
  auto seq = out.backend->NewSequence(static_cast<int>(ids.size()) + 8);
  REQUIRE(seq.ok());
  out.seq = std::move(seq).value();
  PrefillOptions po;
  po.layer_states = po.surprisal = true;
  PrefillResult pr;
  REQUIRE(out.backend->Prefill(*out.seq, absl::MakeConstSpan(ids).first(p), po, &pr).ok());
  auto prefix = dec.MakePrefix(pr.layers, p, pr.surprisal);
  REQUIRE(prefix.ok());
  out.prefix = std::move(prefix).value();
  return out;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

TEST_CASE("decoder with the full cache reproduces the backend's decode", "[cpu]") {
  auto model = TinyModel();
  auto dec = SekvDecoder::Create(model);
  REQUIRE(dec.ok());
  const auto ids = Tokens(60, 1);
  const int p = 50;
  Prefilled pf = Prefill(model, **dec, ids, p);
  FullKvCache full((*dec)->shape(), pf.prefix);
  std::vector<float> mine, ref;
  for (int i = p; i < 60; ++i) {
    REQUIRE((*dec)->Step(ids[i], i, full, &mine).ok());
    Sequence* batch[] = {pf.seq.get()};
    REQUIRE(pf.backend->Decode(batch, absl::MakeConstSpan(&ids[i], 1), &ref).ok());
    REQUIRE(MaxDiff(mine, ref) < 1e-4);
  }
}

TEST_CASE("a batched step gives each sequence its own step's logits", "[cpu]") {
  // Three prompts of different lengths, each with a SEKV cache at 0.4 (and one row with a full
  // cache): stepped one by one, and, from identical caches, all in one StepBatch.
  auto model = TinyModel();
  auto dec = SekvDecoder::Create(model);
  REQUIRE(dec.ok());
  const int lengths[] = {90, 130, 110};
  std::vector<std::vector<int32_t>> ids;
  std::vector<Prefilled> pf;
  std::vector<std::unique_ptr<KvCache>> alone, batched;
  for (int r = 0; r < 3; ++r) {
    ids.push_back(Tokens(lengths[r] + 12, 20 + r));
    pf.push_back(Prefill(model, **dec, ids[r], lengths[r]));
    const BudgetPlan plan =
        PlanBudget(pf[r].prefix.surprisal, 0.4, SekvOptions{}, BudgetShares{}, 8);
    for (auto* set : {&alone, &batched}) {
      auto c = SekvCache::CreateWithSegmentation((*dec)->shape(), pf[r].prefix, plan.segmentation,
                                                 plan.sekv, nullptr);
      REQUIRE(c.ok());
      set->push_back(std::move(c).value());
    }
  }
  for (auto* set : {&alone, &batched}) {
    set->push_back(std::make_unique<FullKvCache>((*dec)->shape(), pf[0].prefix));
  }
  const int rows = 4;
  auto prompt_length = [&](int r) { return lengths[r % 3]; };
  auto token = [&](int r, int i) { return ids[r % 3][prompt_length(r) + i]; };
  std::vector<float> one;
  std::vector<std::vector<float>> all;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> tokens;
    std::vector<int> positions;
    std::vector<KvCache*> caches;
    for (int r = 0; r < rows; ++r) {
      tokens.push_back(token(r, i));
      positions.push_back(prompt_length(r) + i);
      caches.push_back(batched[r].get());
    }
    REQUIRE((*dec)->StepBatch(tokens, positions, caches, &all).ok());
    REQUIRE(all.size() == rows);
    for (int r = 0; r < rows; ++r) {
      REQUIRE((*dec)->Step(tokens[r], positions[r], *alone[r], &one).ok());
      INFO("row " << r << ", step " << i);
      REQUIRE(all[r].size() == one.size());
      REQUIRE(MaxDiff(all[r], one) < 1e-4);
    }
  }
  for (int r = 0; r < rows; ++r) {
    CHECK(batched[r]->Memory().window == alone[r]->Memory().window);
    CHECK(batched[r]->Memory().full_kv == alone[r]->Memory().full_kv);
  }
  for (int r = 0; r < 3; ++r) {  // the same zoom-ins, so the same rows attended
    const ZoomStats a = static_cast<SekvCache&>(*alone[r]).zoom_stats();
    const ZoomStats b = static_cast<SekvCache&>(*batched[r]).zoom_stats();
    CHECK(a.steps == b.steps);
    CHECK(a.expanded_tokens == b.expanded_tokens);
  }

  SECTION("a bad token or mismatched spans fail before any cache changes") {
    const size_t before = batched[1]->Memory().window;
    const int32_t bad[] = {5, 64};
    const int pos[] = {200, 200};
    KvCache* two[] = {batched[3].get(), batched[1].get()};
    const absl::Status st = (*dec)->StepBatch(bad, pos, two, &all);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(st.message(), "token id 64"));
    CHECK((*dec)->StepBatch(absl::MakeConstSpan(bad, 1), pos, two, &all).code() ==
          absl::StatusCode::kInvalidArgument);
    CHECK(batched[1]->Memory().window == before);
    CHECK((*dec)->StepBatch({}, {}, {}, &all).ok());
    CHECK(all.empty());
  }
}

// A cache as the attention of an external row of a backend step; fails at `fail_layer`.
class CacheRow : public RowAttention {
 public:
  explicit CacheRow(KvCache& cache, int fail_layer = -1) : cache_(cache), fail_(fail_layer) {}
  absl::Status Attend(int layer, const float* q, const float* k, const float* v, float* out,
                      void*) override {
    if (layer == fail_) return absl::InternalError("row attention failed");
    cache_.Attend(layer, q, k, v, out);
    return absl::OkStatus();
  }

 private:
  KvCache& cache_;
  int fail_;
};

// Prompt 0 in a backend sequence (and a twin decoded alone), prompt 1 in two identical SEKV
// caches at 0.4 (one an external row of the mixed step, one stepped by the decoder alone),
// prompt 2 in a full cache, likewise. Each prompt has 10 more tokens to decode.
struct MixedStep {
  MixedStep();
  Backend& backend() { return *pf[0].backend; }

  std::shared_ptr<const Model> model = TinyModel();
  std::unique_ptr<SekvDecoder> dec;
  const int lengths[3] = {70, 120, 95};
  std::vector<std::vector<int32_t>> ids;
  std::vector<Prefilled> pf;
  std::unique_ptr<Sequence> twin;
  std::vector<std::unique_ptr<KvCache>> mixed, alone;
};

MixedStep::MixedStep() {
  auto created = SekvDecoder::Create(model);
  REQUIRE(created.ok());
  dec = std::move(created).value();
  for (int r = 0; r < 3; ++r) {
    ids.push_back(Tokens(lengths[r] + 10, 40 + r));
    pf.push_back(Prefill(model, *dec, ids[r], lengths[r]));
  }
  twin = backend().NewSequence(lengths[0] + 10).value();
  PrefillResult pr;
  REQUIRE(backend().Prefill(*twin, absl::MakeConstSpan(ids[0]).first(lengths[0]), {}, &pr).ok());
  const BudgetPlan plan = PlanBudget(pf[1].prefix.surprisal, 0.4, SekvOptions{}, BudgetShares{}, 8);
  for (auto* set : {&mixed, &alone}) {
    auto c = SekvCache::CreateWithSegmentation(dec->shape(), pf[1].prefix, plan.segmentation,
                                               plan.sekv, nullptr);
    REQUIRE(c.ok());
    set->push_back(std::move(c).value());
    set->push_back(std::make_unique<FullKvCache>(dec->shape(), pf[2].prefix));
  }
}

// Ten mixed steps: the sequence's greedy token is its twin's, each external row's logits the
// decoder's step of its twin cache alone.
void StepMixedAgainstAlone(MixedStep& f) {
  CacheRow row1(*f.mixed[0]), row2(*f.mixed[1]);
  RowAttention* const rows[] = {&row1, &row2};
  Sequence* const seqs[] = {f.pf[0].seq.get()};
  Sequence* const twins[] = {f.twin.get()};
  const SampleDraw greedy[] = {SampleDraw{}};
  for (int i = 0; i < 10; ++i) {
    INFO("step " << i);
    const int32_t seq_token[] = {f.ids[0][f.lengths[0] + i]};
    const int32_t ext_tokens[] = {f.ids[1][f.lengths[1] + i], f.ids[2][f.lengths[2] + i]};
    const int positions[] = {f.lengths[1] + i, f.lengths[2] + i};
    ExternalRows external;
    external.tokens = ext_tokens;
    external.positions = positions;
    external.attention = rows;
    std::vector<int32_t> next;
    std::vector<std::vector<float>> ext_logits;
    REQUIRE(f.backend().DecodeMixed(seqs, seq_token, greedy, &next, external, &ext_logits).ok());
    REQUIRE(next.size() == 1);
    REQUIRE(ext_logits.size() == 2);
    std::vector<float> ref;
    REQUIRE(f.backend().Decode(twins, seq_token, &ref).ok());
    CHECK(next[0] == std::max_element(ref.begin(), ref.end()) - ref.begin());
    CHECK(f.pf[0].seq->length() == f.twin->length());
    for (int r = 0; r < 2; ++r) {
      REQUIRE(f.dec->Step(ext_tokens[r], positions[r], *f.alone[r], &ref).ok());
      CHECK(MaxDiff(ext_logits[r], ref) < 1e-4);
    }
  }
}

// External rows alone (no sequence) are a step too.
void StepExternalRowsAlone(MixedStep& f) {
  CacheRow row2(*f.mixed[1]);
  const int32_t tok[] = {f.ids[2][f.lengths[2] + 10 - 1]};
  const int pos[] = {f.lengths[2] + 10};
  RowAttention* const one[] = {&row2};
  ExternalRows external;
  external.tokens = tok;
  external.positions = pos;
  external.attention = one;
  std::vector<int32_t> next;
  std::vector<std::vector<float>> ext_logits;
  REQUIRE(f.backend().DecodeMixed({}, {}, {}, &next, external, &ext_logits).ok());
  CHECK(next.empty());
  std::vector<float> ref;
  REQUIRE(f.dec->Step(tok[0], pos[0], *f.alone[1], &ref).ok());
  CHECK(MaxDiff(ext_logits[0], ref) < 1e-4);
}

// Bad input (a token or position out of range, a missing row) is refused before anything
// runs; a failing row fails the step, and the sequence stays where it was.
void CheckMixedStepRefusals(MixedStep& f) {
  const int length = f.pf[0].seq->length();
  Sequence* const seqs[] = {f.pf[0].seq.get()};
  const SampleDraw greedy[] = {SampleDraw{}};
  const int32_t seq_token[] = {5};
  CacheRow row2(*f.mixed[1]);
  CacheRow failing(*f.mixed[1], /*fail_layer=*/1);
  for (int c = 0; c < 4; ++c) {
    INFO("case " << c);
    const int32_t tok[] = {c == 0 ? f.model->config.vocab_size : 7};
    const int pos[] = {c == 1 ? f.model->config.max_position_embeddings : 200};
    RowAttention* const bad[] = {c == 2 ? nullptr : (c == 3 ? &failing : &row2)};
    ExternalRows external;
    external.tokens = tok;
    external.positions = pos;
    external.attention = bad;
    std::vector<int32_t> next;
    std::vector<std::vector<float>> ext_logits;
    const absl::Status st =
        f.backend().DecodeMixed(seqs, seq_token, greedy, &next, external, &ext_logits);
    CHECK(st.code() == (c == 0 || c == 2 ? absl::StatusCode::kInvalidArgument
                        : c == 1         ? absl::StatusCode::kOutOfRange
                                         : absl::StatusCode::kInternal));
    CHECK(f.pf[0].seq->length() == length);
  }
}

TEST_CASE(
    "a CPU backend step of its sequences and external rows gives each what it gets alone "
    "(Backend::DecodeMixed)",
    "[cpu]") {
  MixedStep f;
  StepMixedAgainstAlone(f);
  StepExternalRowsAlone(f);
  CheckMixedStepRefusals(f);
}

TEST_CASE("MakePrefix takes an rvalue's rows over and gives what a copy gives", "[cpu]") {
  auto model = TinyModel();
  auto dec = SekvDecoder::Create(model);
  REQUIRE(dec.ok());
  const auto ids = Tokens(40, 2);
  Prefilled pf = Prefill(model, **dec, ids, 40);
  ExternalKv kv;
  kv.num_tokens = 40;
  for (int l = 0; l < model->config.num_layers; ++l) {
    kv.k_pre_rope.push_back(pf.prefix.k[l]);  // any rows will do: RoPE is applied once more
    kv.v.push_back(pf.prefix.v[l]);
  }
  auto copied = (*dec)->MakePrefix(kv, pf.prefix.surprisal);
  REQUIRE(copied.ok());
  const float* k0 = kv.k_pre_rope[0].data();
  const float* v0 = kv.v[0].data();
  auto moved = (*dec)->MakePrefix(std::move(kv), pf.prefix.surprisal);
  REQUIRE(moved.ok());
  CHECK(moved->k[0].data() == k0);  // the same storage, no copy
  CHECK(moved->v[0].data() == v0);
  CHECK(moved->k == copied->k);
  CHECK(moved->v == copied->v);
  CHECK(moved->surprisal == copied->surprisal);
}

TEST_CASE("SEKV with every span expanded equals the full cache", "[cpu]") {
  auto model = TinyModel();
  auto dec = SekvDecoder::Create(model);
  REQUIRE(dec.ok());
  const auto ids = Tokens(120, 2);
  const int p = 100;
  Prefilled pf = Prefill(model, **dec, ids, p);
  SekvOptions o;
  o.segmenter.window = 8;
  o.segmenter.min_span = 3;
  o.store.energy = 1.0;   // lossless CPU bases
  o.expand_budget = p;    // room for every span
  o.tau_override = 0.0f;  // the gate passes every span
  for (int run = 0; run < 4; ++run) {
    o.async_fetch = run % 2 == 1;
    o.resolution = run < 2 ? ZoomResolution::kToken : ZoomResolution::kSpan;
    auto sekv = SekvCache::Create((*dec)->shape(), pf.prefix, o, nullptr);
    REQUIRE(sekv.ok());
    REQUIRE((*sekv)->segmentation().spans.size() > 5);
    FullKvCache full((*dec)->shape(), pf.prefix);
    std::vector<float> a, b;
    for (int i = p; i < 120; ++i) {
      REQUIRE((*dec)->Step(ids[i], i, **sekv, &a).ok());
      REQUIRE((*dec)->Step(ids[i], i, full, &b).ok());
      REQUIRE(MaxDiff(a, b) < 1e-4);
    }
    const ZoomStats z = (*sekv)->zoom_stats();
    REQUIRE(z.expanded_spans == z.steps * static_cast<long>((*sekv)->segmentation().spans.size()));
    const FetchStats f = (*sekv)->fetch_stats();
    REQUIRE(f.hits > 0);  // later steps reuse the cached expansions
  }
  SECTION("all tokens in the window is the full cache too") {
    SekvOptions w;
    w.segmenter.window = p;
    auto sekv = SekvCache::Create((*dec)->shape(), pf.prefix, w, nullptr);
    REQUIRE(sekv.ok());
    FullKvCache full((*dec)->shape(), pf.prefix);
    std::vector<float> a, b;
    REQUIRE((*dec)->Step(ids[p], p, **sekv, &a).ok());
    REQUIRE((*dec)->Step(ids[p], p, full, &b).ok());
    REQUIRE(MaxDiff(a, b) < 1e-4);
  }
}

TEST_CASE("caches at a budget report their bytes and stay close to the full cache", "[cpu]") {
  auto model = TinyModel();
  auto dec = SekvDecoder::Create(model);
  REQUIRE(dec.ok());
  const auto ids = Tokens(200, 3);
  const int p = 180;
  Prefilled pf = Prefill(model, **dec, ids, p);
  const BudgetPlan plan = PlanBudget(pf.prefix.surprisal, 0.4, SekvOptions{}, BudgetShares{}, 8);
  auto sekv = SekvCache::CreateWithSegmentation((*dec)->shape(), pf.prefix, plan.segmentation,
                                                plan.sekv, nullptr);
  auto h2o = HeavyHitterCache::Create((*dec)->shape(), pf.prefix, plan.h2o);
  auto chunk = CreateChunkCache((*dec)->shape(), pf.prefix, plan.chunk);
  REQUIRE(sekv.ok());
  REQUIRE(h2o.ok());
  REQUIRE(chunk.ok());
  FullKvCache full((*dec)->shape(), pf.prefix);
  KvCache* caches[] = {sekv->get(), h2o->get(), chunk->get()};
  std::vector<float> ref, got;
  REQUIRE((*dec)->Step(ids[p], p, full, &ref).ok());
  for (KvCache* c : caches) {
    REQUIRE((*dec)->Step(ids[p], p, *c, &got).ok());
    const MemoryBreakdown m = c->Memory();
    INFO(c->kind());
    REQUIRE(m.full_kv == full.Memory().full_kv);
    REQUIRE(m.gpu_ratio() <= 0.41);
    REQUIRE(m.gpu_ratio() >= 0.25);
    double z = 0;
    for (float x : got) z += std::isfinite(x) ? 0 : 1;
    REQUIRE(z == 0);
  }
  const MemoryBreakdown sm = (*sekv)->Memory();
  REQUIRE(sm.anchors > 0);
  REQUIRE(sm.summaries > 0);
  REQUIRE(sm.expanded_cache == size_t(2) * 2 * plan.sekv.expand_budget * 2 * 8 * sizeof(float));
  REQUIRE(plan.sekv.pin_tokens > 0);
  REQUIRE(sm.pinned == size_t(2) * 2 * plan.sekv.pin_tokens * 2 * 8 * sizeof(float));
  REQUIRE(sm.cpu_bases > 0);
  REQUIRE((*chunk)->Memory().cpu_bases == 0);  // no zoom-in, no CPU tier
}

TEST_CASE("router calibration separates heavy spans on a small case", "[cpu]") {
  // Synthetic samples: a span is significant when <q, k̄> is large; the fit must find it.
  const int hd = 4;
  CalibrationOptions co;
  co.max_samples_per_head = 4000;
  co.target_recall = 0;  // F_beta threshold
  RouterSampleSet set(1, 1, hd, co);
  SplitMix64 rng(9);
  std::vector<float> q(hd), k(hd);
  for (int i = 0; i < 4000; ++i) {
    FillNormal(q.data(), hd, 100 + i, 0.0f, 1.0f);
    FillNormal(k.data(), hd, 50000 + i, 0.0f, 1.0f);
    float dot = 0;
    for (int c = 0; c < hd; ++c)
      dot += q[c] * k[c] * (c == 0 ? 3.0f : 0.0f);  // only channel 0 matters
    const float mass = dot > 1.0f ? 0.5f : 0.001f;
    set.Add(0, 0, q.data(), k.data(), hd, 1.0f, -3.0f, mass);
  }
  nlohmann::json report;
  auto router = FitZoomRouter(set, co, &report);
  REQUIRE(router.ok());
  REQUIRE(report["heads"][0]["fit"] == "logistic");
  REQUIRE(report["heads"][0]["precision"].get<double>() > 0.85);
  REQUIRE(report["heads"][0]["recall"].get<double>() > 0.85);
  // The routed score orders spans by the hidden rule.
  std::vector<float> qr(hd);
  const float qq[hd] = {1, 0, 0, 0}, hi[hd] = {1, 0, 0, 0}, lo[hd] = {-1, 0, 0, 0};
  router->RouteQuery(0, 0, qq, qr.data());
  float b_hi = 0, b_lo = 0;
  for (int c = 0; c < hd; ++c) {
    b_hi += qr[c] * hi[c];
    b_lo += qr[c] * lo[c];
  }
  REQUIRE(b_hi > b_lo + 1.0f);
}

TEST_CASE("SEKV artifact round-trips and rejects corrupt files", "[cpu]") {
  auto model = TinyModel();
  ZoomRouter r = ZoomRouter::Default(2, 2, 8, 0.05f);
  r.Reset(2, 2, 8, 3);
  for (size_t i = 0; i < r.all_p_q().size(); ++i) {
    r.all_p_q()[i] = 0.01f * i;
    r.all_p_k()[i] = -0.02f * i;
  }
  r.gate(1, 1) = RouterGate{0.5f, 0.9f, -1.5f, 0.3f};
  SekvArtifact a;
  a.model_name = "tiny";
  a.model_digest = model->digest();
  a.router = r;
  a.report = {{"note", "test"}};
  const std::string path = testing::TempDir() + "/router.sekv.safetensors";
  REQUIRE(a.Save(path).ok());
  auto b = SekvArtifact::Load(path);
  REQUIRE(b.ok());
  REQUIRE(b->router.all_p_q() == r.all_p_q());
  REQUIRE(b->router.all_p_k() == r.all_p_k());
  REQUIRE(b->router.gate(1, 1).bias == -1.5f);
  REQUIRE(b->router.gate(1, 1).tau == 0.3f);
  REQUIRE(b->report["note"] == "test");
  REQUIRE(b->CheckModel(*model).ok());
  REQUIRE(!b->CheckModel(*MakeSyntheticModel(model->config, 6, 0.3f)).ok());

  std::string bytes = testing::ReadFileOrFail(path);
  SECTION("a flipped byte inside a tensor") { bytes[bytes.size() - 5] ^= 0x40; }
  SECTION("a truncated file") { bytes.resize(bytes.size() / 2); }
  SECTION("garbage") { bytes = "not a safetensors file at all"; }
  const std::string bad = testing::TempDir() + "/bad.sekv.safetensors";
  std::ofstream(bad, std::ios::binary) << bytes;
  REQUIRE(!SekvArtifact::Load(bad).ok());
}

TEST_CASE("heavy hitters keep the most attended tokens", "[cpu]") {
  // One layer, one head; the query attends strongly to token 7 of 30.
  CacheShape shape{1, 1, 1, 4};
  PrefixKv prefix;
  prefix.num_tokens = 30;
  prefix.k.assign(1, std::vector<float>(30 * 4, 0.0f));
  prefix.v.assign(1, std::vector<float>(30 * 4, 0.0f));
  prefix.surprisal.assign(30, 1.0f);
  for (int i = 0; i < 30; ++i) prefix.v[0][i * 4] = float(i);
  prefix.k[0][7 * 4] = 10.0f;
  HeavyHitterOptions o;
  o.budget_tokens = 6;
  o.window = 2;
  o.sink_tokens = 1;
  o.pool_radius = 0;
  auto c = HeavyHitterCache::Create(shape, prefix, o);
  REQUIRE(c.ok());
  const float q[4] = {1, 0, 0, 0}, k[4] = {0, 0, 0, 0}, v[4] = {100, 0, 0, 0};
  float out[4];
  (*c)->Attend(0, q, k, v, out);
  // Kept: sink 0, hit 7 plus 3 others, window 28-29, and the new token: 7 rows.
  REQUIRE((*c)->Memory().window == 7 * 4 * 2 * sizeof(float));
  // Token 7 dominates (e^{5} against e^0 for the others): the output leans to its value 7.
  REQUIRE(out[0] > 5.0f);
  REQUIRE(out[0] < 8.0f + 100.0f / 100.0f);
}

}  // namespace
}  // namespace scd::sekv
