// scd-sekv-bench: SEKV at scale on the Llama-3-8B shape (32 layers, d 4096, 32 heads / 8 KV
// heads, head_dim 128, FFN 14336) with random weights and random K/V:
//   1. memory: GPU-tier bytes against a full KV cache at each --mem-lengths, summed over all 32
//      layers from the real data structures (SpanStore vectors and the SpanFetcher buffer).
//      Layers are built one at a time and freed (a 128K fp32 full cache is 34 GB); the CPU
//      tier (per-span SVDs) is built for layer 0 only and reported per layer, with its build
//      time and the page faults the build took (its bases are fresh memory, as a request's
//      are), the time it takes to free it (a finished request's hierarchy is freed off the
//      decode engine's loop for that reason), and, side by side on that layer's span Gram matrices
//      (keys, every KV head), the time of the eigensolver TruncatedSvd uses (SymmetricEigen)
//      against cyclic Jacobi.
//   2. decode: the CPU decode-step time with the full cache and with SEKV at the same budget,
//      at each --time-lengths, in one run, on the first --time-layers layers of the shape (the
//      whole model does not fit this host's memory in fp32), with --vocab output rows.
//   3. batching: --batch-sizes concurrent SEKV requests of --batch-length tokens on that
//      model, each round stepped one by one (SekvDecoder::Step, as the decode engine did) and
//      then as one batch (SekvDecoder::StepBatch: the weights read once per step), alternating,
//      so the two share the machine's state; tokens per second and the speedup.
//   4. mixed steps: --mixed P:S,... plain requests (a CPU backend sequence each) and S SEKV
//      requests of --batch-length tokens each decoding at once on that model, every round
//      stepped as two steps (the backend's DecodeSample of the P, then SekvDecoder::StepBatch
//      of the S: the weights read twice) and then as one (Backend::DecodeMixed, the SEKV rows'
//      attention their caches': the weights read once), alternating which goes first, each
//      after a pause; the speedup.
// Surprisal: from the real stories260K on packed TinyStories text (--surprisal-model and
// --surprisal-text), tiled to the length; else i.i.d. exponential.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/huge_pages.h"
#include "common/base/random.h"
#include "common/eval/text_corpus.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/low_rank.h"
#include "common/sekv/packed_text.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/sekv_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tools/cli/flags.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace scd;
using namespace scd::sekv;

double Ms(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

ModelConfig Llama3Shape(int layers, int vocab) {
  ModelConfig c;
  c.name = "llama3-8b-shape (synthetic)";
  c.hidden_size = 4096;
  c.num_layers = layers;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 14336;
  c.vocab_size = vocab;
  c.max_position_embeddings = 131072;
  c.rope_theta = 500000.0f;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = true;
  return c;
}

std::vector<float> Surprisal(int t, const std::vector<float>& real, uint64_t seed) {
  std::vector<float> s(t);
  if (!real.empty()) {
    for (int i = 0; i < t; ++i) s[i] = real[i % real.size()];
  } else {
    FillUniform(s.data(), t, seed, 0.0f, 1.0f);
    for (float& x : s) x = -std::log(1.0f - x) * 2.0f;
  }
  s[0] = 0;
  return s;
}

// --mixed's "P:S,P:S" into pairs of counts >= 1.
absl::StatusOr<std::vector<std::pair<int, int>>> ParseMixes(const std::string& text) {
  std::vector<std::pair<int, int>> mixes;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> counts = absl::StrSplit(part, ':');
    int plain = 0, sekv = 0;
    if (counts.size() != 2 || !absl::SimpleAtoi(counts[0], &plain) ||
        !absl::SimpleAtoi(counts[1], &sekv) || plain < 1 || sekv < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mixed takes plain:SEKV pairs of counts >= 1, not \"", part, "\""));
    }
    mixes.emplace_back(plain, sekv);
  }
  return mixes;
}

// Seconds SymmetricEigen and SymmetricEigenJacobi take over the Gram matrices of one layer's
// span keys (SmallerGram, as TruncatedSvd forms them), every KV head.
std::pair<double, double> EigenSeconds(const float* k, const Segmentation& seg, int kv_heads,
                                       int head_dim) {
  const int kvd = kv_heads * head_dim;
  double solver = 0, jacobi = 0;
  std::vector<double> g, lam, vec;
  for (const TokenSpan& sp : seg.spans) {
    const int n = sp.length(), m = std::min(n, head_dim);
    for (int h = 0; h < kv_heads; ++h) {
      const float* x = k + static_cast<size_t>(sp.begin) * kvd + h * head_dim;
      g = SmallerGram(x, n, head_dim, kvd);
      auto t0 = Clock::now();
      SymmetricEigen(g, m, &lam, &vec);
      solver += Ms(t0) / 1e3;
      t0 = Clock::now();
      SymmetricEigenJacobi(g, m, &lam, &vec);
      jacobi += Ms(t0) / 1e3;
    }
  }
  return {solver, jacobi};
}

// A prompt of `t` positions with N(0, 1) K/V in every layer of `shape`.
PrefixKv RandomPrefix(const CacheShape& shape, int t, std::vector<float> surprisal) {
  PrefixKv prefix;
  prefix.num_tokens = t;
  prefix.surprisal = std::move(surprisal);
  const size_t n = static_cast<size_t>(t) * shape.kv_dim();
  for (int l = 0; l < shape.num_layers; ++l) {
    prefix.k.emplace_back(n);
    prefix.v.emplace_back(n);
    FillNormal(prefix.k.back().data(), n, 500 + 2 * l, 0.0f, 1.0f);
    FillNormal(prefix.v.back().data(), n, 501 + 2 * l, 0.0f, 1.0f);
  }
  return prefix;
}

// `n` SEKV caches of `prefix` at `plan`, owned by *caches and listed in *rows; false when one
// cannot be made.
bool MakeCaches(const CacheShape& shape, const PrefixKv& prefix, const BudgetPlan& plan, int n,
                std::vector<std::unique_ptr<SekvCache>>* caches, std::vector<KvCache*>* rows) {
  for (int i = 0; i < n; ++i) {
    auto c =
        SekvCache::CreateWithSegmentation(shape, prefix, plan.segmentation, plan.sekv, nullptr);
    if (!c.ok()) return false;
    caches->push_back(std::move(c).value());
    rows->push_back(caches->back().get());
  }
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The command line.
struct Options {
  float budget = static_cast<float>(sekv::kDefaultBudget);
  std::vector<int> mem_lengths = {32768, 131072}, time_lengths = {8192, 32768};
  std::string surprisal_model, surprisal_text;
  int time_layers = 2, vocab = 32000, steps = 8, batch_length = 4096;
  std::vector<int> batch_sizes = {1, 2, 4, 8};
  std::string mixed = "1:1,4:4";
  std::vector<std::pair<int, int>> mixes;  // --mixed, parsed
};

void AddFlags(scd::cli::FlagParser& flags, Options* o) {
  flags.AddFloat("budget", &o->budget,
                 "GPU-tier bytes as a fraction of full KV (the planner's target)");
  flags.AddIntList("mem-lengths", &o->mem_lengths, "context lengths of the memory measurement");
  flags.AddIntList("time-lengths", &o->time_lengths, "context lengths of the decode timing");
  flags.AddInt("time-layers", &o->time_layers, "layers of the timed model");
  flags.AddInt("vocab", &o->vocab, "vocabulary of the timed model");
  flags.AddInt("steps", &o->steps, "timed decode steps (median reported)");
  flags.AddIntList("batch-sizes", &o->batch_sizes,
                   "concurrent SEKV requests stepped one by one and as one batch (empty: skip)");
  flags.AddInt("batch-length", &o->batch_length, "context length of each batched request");
  flags.AddString("mixed", &o->mixed,
                  "plain:SEKV request counts stepped as two steps and as one mixed step "
                  "(empty: skip)");
  flags.AddString("surprisal-model", &o->surprisal_model,
                  "take surprisal from this model's prefill");
  flags.AddString("surprisal-text", &o->surprisal_text, "text for --surprisal-model");
}

// The checks of a parsed command line (and --mixed parsed into o->mixes): the usage error's
// exit code, or nullopt.
std::optional<int> CheckFlags(const scd::cli::FlagParser& flags, Options* o) {
  for (const std::vector<int>* list : {&o->mem_lengths, &o->time_lengths, &o->batch_sizes}) {
    for (int n : *list) {
      if (n < 1) return flags.UsageError(absl::StrCat("lengths and sizes must be >= 1, not ", n));
    }
  }
  absl::StatusOr<std::vector<std::pair<int, int>>> mixes = ParseMixes(o->mixed);
  if (!mixes.ok()) return flags.UsageError(mixes.status());
  o->mixes = std::move(mixes).value();
  if (o->surprisal_model.empty() != o->surprisal_text.empty()) {
    return flags.UsageError("--surprisal-model and --surprisal-text go together");
  }
  return std::nullopt;
}

// --surprisal-model's surprisal over --surprisal-text, packed into whole contexts, into *real
// (left empty without them): 0, or the exit code of a failure.
int ReadRealSurprisal(const scd::cli::FlagParser& flags, const Options& o,
                      std::vector<float>* real) {
  if (o.surprisal_model.empty() || o.surprisal_text.empty()) {
    std::printf("surprisal: i.i.d. exponential (mean 2 nats)\n");
    return 0;
  }
  auto model = LoadModel(o.surprisal_model);
  auto tok = Tokenizer::FromFile(o.surprisal_model + "/tokenizer.json");
  auto passages = eval::ReadPassages(o.surprisal_text);
  for (const absl::Status& st : {model.status(), tok.status(), passages.status()}) {
    if (!st.ok()) return flags.Fail(st);
  }
  auto backend = CreateBackend(BackendKind::kCpu, *model);
  const int ctx = (*model)->config.max_position_embeddings;
  for (const auto& ids : PackPassages(**tok, *passages, ctx, 64)) {
    auto seq = (*backend)->NewSequence(ctx);
    PrefillOptions po;
    po.surprisal = true;
    PrefillResult pr;
    if (!(*backend)->Prefill(**seq, ids, po, &pr).ok()) return scd::cli::kExitFailure;
    real->insert(real->end(), pr.surprisal.begin() + 1, pr.surprisal.end());
  }
  std::printf("surprisal: stories260K on %zu tokens of %s, tiled\n", real->size(),
              o.surprisal_text.c_str());
  return 0;
}

// One --mem-lengths row: every layer's SpanStore built and freed in turn, their bytes summed;
// the CPU tier of layer 0 alone, its build time, page faults and free time, and the
// eigensolvers on its span Gram matrices.
struct MemoryRow {
  MemoryBreakdown total;
  size_t cpu_layer0 = 0;
  double build_layer0 = 0;
  long faults_layer0 = 0;
  double free_layer0 = 0;
  std::pair<double, double> eigen;
};

MemoryRow BuildLayers(const CacheShape& shape, int t, const std::vector<float>& s,
                      const BudgetPlan& plan) {
  MemoryRow row;
  const size_t n = static_cast<size_t>(t) * shape.kv_dim();
  std::vector<float> k(n), v(n);
  for (int l = 0; l < shape.num_layers; ++l) {
    FillNormal(k.data(), n, 1000 + 2 * l, 0.0f, 1.0f);
    FillNormal(v.data(), n, 1001 + 2 * l, 0.0f, 1.0f);
    SpanStoreOptions so = plan.sekv.store;
    so.build_cpu_tier = l == 0;
    const long f0 = MinorPageFaults();
    const auto b0 = Clock::now();
    auto st = std::make_unique<SpanStore>(SpanStore::Build(k.data(), v.data(), s, plan.segmentation,
                                                           shape.num_kv_heads, shape.head_dim, so));
    const MemoryBreakdown m = st->Memory();
    row.total += m;
    if (l == 0) {
      row.build_layer0 = Ms(b0) / 1e3;
      row.faults_layer0 = MinorPageFaults() - f0;
      row.cpu_layer0 = m.cpu_bases;
      row.eigen = EigenSeconds(k.data(), plan.segmentation, shape.num_kv_heads, shape.head_dim);
      const auto d0 = Clock::now();
      st.reset();
      row.free_layer0 = Ms(d0) / 1e3;
    }
  }
  return row;
}

// The GPU rows SpanStores do not hold, added to *total: the SpanFetcher's expansion buffer and
// SekvCache's own (not built here: it needs every layer's K/V at once): the pinned rows,
// [pin_tokens, head_dim] K and V per (layer, KV head), and with pins the per-head summary
// counts, one float per (layer, KV head, span). tests/sekv checks these sizes.
void AddCacheRows(const CacheShape& shape, const BudgetPlan& plan, MemoryBreakdown* total) {
  const SpanFetcher fetcher(shape.num_layers, shape.num_kv_heads, shape.head_dim,
                            plan.sekv.expand_budget, false);
  total->expanded_cache = fetcher.CapacityBytes();
  const size_t layer_heads = static_cast<size_t>(shape.num_layers) * shape.num_kv_heads;
  total->pinned = layer_heads * plan.sekv.pin_tokens * 2 * shape.head_dim * sizeof(float);
  if (plan.sekv.pin_tokens > 0) {
    total->summaries += layer_heads * plan.segmentation.spans.size() * sizeof(float);
  }
}

void PrintMemoryRow(int t, const BudgetPlan& plan, const MemoryRow& row) {
  const MemoryBreakdown& total = row.total;
  std::printf("%8d %12.3f %12.3f %10.3f %8zu %8zu %8d %8d %8d %10d %12.3f %12.2f %10ld %12.3f\n", t,
              total.full_kv / 1e9, total.gpu() / 1e9, total.gpu_ratio(),
              plan.segmentation.anchors.size(), plan.segmentation.spans.size(),
              plan.segmentation.window_length(), plan.sekv.pin_tokens, plan.sekv.expand_budget,
              plan.sekv.segmenter.min_span, row.cpu_layer0 / 1e9, row.build_layer0,
              row.faults_layer0, row.free_layer0);
  std::printf(
      "         CPU tier of layer 0, key Gram matrices of every span and KV head: "
      "SymmetricEigen %.2f s, cyclic Jacobi %.2f s (%.1fx)\n",
      row.eigen.first, row.eigen.second, row.eigen.second / std::max(row.eigen.first, 1e-9));
  std::printf(
      "         GPU bytes: anchors %.3f GB, summaries %.3f GB, window %.3f GB, pinned %.3f GB, "
      "expansion buffer %.3f GB\n",
      total.anchors / 1e9, total.summaries / 1e9, total.window / 1e9, total.pinned / 1e9,
      total.expanded_cache / 1e9);
}

// 1. Memory at long contexts, all 32 layers.
void MeasureMemory(const Options& o, const std::vector<float>& real_surprisal) {
  const ModelConfig full_shape = Llama3Shape(32, o.vocab);
  const CacheShape shape = CacheShape::FromConfig(full_shape);
  std::printf("\nmemory: budget %.2f, all %d layers built one at a time from random N(0,1) K/V\n",
              o.budget, shape.num_layers);
  std::printf("%8s %12s %12s %10s %8s %8s %8s %8s %8s %10s %12s %12s %10s %12s\n", "tokens",
              "full_GB", "gpu_GB", "gpu/full", "anchors", "spans", "window", "pinned", "expand",
              "min_span", "cpu_GB/layer", "cpu_s/layer", "faults", "free_s/layer");
  for (int t : o.mem_lengths) {
    const auto s = Surprisal(t, real_surprisal, 7);
    const BudgetPlan plan = PlanBudget(s, o.budget, SekvOptions{}, BudgetShares{}, shape.head_dim);
    MemoryRow row = BuildLayers(shape, t, s, plan);
    AddCacheRows(shape, plan, &row.total);
    PrintMemoryRow(t, plan, row);
  }
}

// The median time of `steps` decode steps through `cache` (after 2 warm-ups) from position
// `t`, and in *attn_ms the median of one layer's attention alone for a random query: the same
// query against both caches, outside the model. -1 when a step fails.
double TimeSteps(SekvDecoder& dec, const CacheShape& ts, int t, int steps, KvCache& cache,
                 double* attn_ms) {
  std::vector<float> q(ts.q_dim()), kk(ts.kv_dim()), out(ts.q_dim()), logits;
  std::vector<double> step_ms, att;
  for (int i = 0; i < steps + 2; ++i) {
    const auto t0 = Clock::now();
    if (!dec.Step(3 + i, t + i, cache, &logits).ok()) return -1.0;
    const double ms = Ms(t0);
    FillNormal(q.data(), q.size(), 77 + i, 0.0f, 1.0f);
    FillNormal(kk.data(), kk.size(), 88 + i, 0.0f, 1.0f);
    const auto t1 = Clock::now();
    cache.Attend(0, q.data(), kk.data(), kk.data(), out.data());
    const double a = Ms(t1);
    if (i >= 2) {
      step_ms.push_back(ms);
      att.push_back(a);
    }
  }
  *attn_ms = Median(att);
  return Median(step_ms);
}

// 2. Decode-step time, full cache against SEKV, same process: 0, or the exit code of a failure.
int MeasureDecode(const Options& o, const std::vector<float>& real_surprisal, const CacheShape& ts,
                  SekvDecoder& dec) {
  std::printf("%8s %12s %12s %10s %14s %14s %12s\n", "tokens", "full_ms", "sekv_ms", "sekv/full",
              "attn_full_ms", "attn_sekv_ms", "expanded/rd");
  for (int t : o.time_lengths) {
    const PrefixKv prefix = RandomPrefix(ts, t, Surprisal(t, real_surprisal, 9));
    const BudgetPlan plan =
        PlanBudget(prefix.surprisal, o.budget, SekvOptions{}, BudgetShares{}, ts.head_dim);
    auto sekv =
        SekvCache::CreateWithSegmentation(ts, prefix, plan.segmentation, plan.sekv, nullptr);
    if (!sekv.ok()) return scd::cli::kExitFailure;
    FullKvCache full(ts, prefix);
    double af = 0, as = 0;
    const double f_ms = TimeSteps(dec, ts, t, o.steps, full, &af);
    const double s_ms = TimeSteps(dec, ts, t, o.steps, **sekv, &as);
    const ZoomStats z = (*sekv)->zoom_stats();
    std::printf("%8d %12.2f %12.2f %10.3f %14.2f %14.2f %12.1f\n", t, f_ms, s_ms, s_ms / f_ms, af,
                as, z.steps > 0 ? double(z.expanded_tokens) / z.steps : 0.0);
    const MemoryBreakdown sm = (*sekv)->Memory();
    std::printf(
        "         SEKV GPU tier %.3f of full KV; %d pinned and %d expansion-buffer tokens per "
        "(layer, head)\n",
        sm.gpu_ratio(), plan.sekv.pin_tokens, plan.sekv.expand_budget);
  }
  return 0;
}

// Rounds of `rows` stepped one by one (Step) and then as one batch (StepBatch) from position
// `t`: the median milliseconds of each, after 2 warm-ups; nullopt when a step fails.
std::optional<std::pair<double, double>> TimeBatchRounds(SekvDecoder& dec, int t, int steps,
                                                         const std::vector<KvCache*>& rows) {
  const int n = static_cast<int>(rows.size());
  std::vector<float> logits;
  std::vector<std::vector<float>> batch_logits;
  std::vector<double> one_ms, batch_ms;
  int position = t;
  for (int round = 0; round < steps + 2; ++round) {
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      if (!dec.Step(3 + round, position, *rows[i], &logits).ok()) return std::nullopt;
    }
    const double one = Ms(t0);
    ++position;
    const std::vector<int32_t> tokens(n, 4 + round);
    const std::vector<int> positions(n, position);
    t0 = Clock::now();
    if (!dec.StepBatch(tokens, positions, rows, &batch_logits).ok()) return std::nullopt;
    const double together = Ms(t0);
    ++position;
    if (round >= 2) {
      one_ms.push_back(one);
      batch_ms.push_back(together);
    }
  }
  return std::make_pair(Median(one_ms), Median(batch_ms));
}

// 3. Concurrent SEKV requests: one Step each against one StepBatch of all. 0, or the exit code
// of a failure.
int MeasureBatching(const Options& o, const std::vector<float>& real_surprisal,
                    const CacheShape& ts, SekvDecoder& dec) {
  const int t = o.batch_length;
  std::printf(
      "\nSEKV requests decoding at once, %d tokens each: every round steps all of them one by "
      "one (Step), then all at once (StepBatch); median of %d rounds after 2 warm-ups\n",
      t, o.steps);
  std::printf("%6s %14s %14s %16s %16s %10s\n", "batch", "one_by_one_ms", "batched_ms",
              "one_by_one_tok/s", "batched_tok/s", "speedup");
  const PrefixKv prefix = RandomPrefix(ts, t, Surprisal(t, real_surprisal, 9));
  const BudgetPlan plan =
      PlanBudget(prefix.surprisal, o.budget, SekvOptions{}, BudgetShares{}, ts.head_dim);
  for (int n : o.batch_sizes) {
    std::vector<std::unique_ptr<SekvCache>> caches;
    std::vector<KvCache*> rows;
    if (!MakeCaches(ts, prefix, plan, n, &caches, &rows)) return scd::cli::kExitFailure;
    const std::optional<std::pair<double, double>> ms = TimeBatchRounds(dec, t, o.steps, rows);
    if (!ms.has_value()) return scd::cli::kExitFailure;
    const auto [a, b] = *ms;
    std::printf("%6d %14.1f %14.1f %16.2f %16.2f %10.2f\n", n, a, b, 1e3 * n / a, 1e3 * n / b,
                a / b);
    std::fflush(stdout);
  }
  return 0;
}

// One --mixed pair's requests: `p` plain ones (a backend sequence each, holding the prompt's
// K/V as an SCD rebuild would append it) and `n` SEKV ones (a SekvCache each, and its
// attention as an external row's).
struct MixedRequests {
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> seqs;
  std::vector<std::unique_ptr<SekvCache>> caches;
  std::vector<KvCache*> rows;
  std::vector<std::unique_ptr<KvCacheRowAttention>> attention_owned;
  std::vector<RowAttention*> attention;
};

bool MakeMixedRequests(Backend& backend, const CacheShape& ts, const PrefixKv& prefix,
                       const BudgetPlan& plan, const ExternalKv& kv, int p, int n, int capacity,
                       MixedRequests* r) {
  for (int i = 0; i < p; ++i) {
    auto seq = backend.NewSequence(capacity);
    if (!seq.ok() || !backend.AppendKv(**seq, kv).ok()) return false;
    r->owned.push_back(std::move(seq).value());
    r->seqs.push_back(r->owned.back().get());
  }
  if (!MakeCaches(ts, prefix, plan, n, &r->caches, &r->rows)) return false;
  for (KvCache* row : r->rows) {
    r->attention_owned.push_back(std::make_unique<KvCacheRowAttention>(*row));
    r->attention.push_back(r->attention_owned.back().get());
  }
  return true;
}

// Rounds of `r` stepped as two steps (the backend's DecodeSample, then StepBatch) and as one
// (Backend::DecodeMixed) from position `t`: the median milliseconds of each, after 2 warm-ups;
// nullopt when a step fails. Each round runs both, the one first that went second in the
// round before, each after a 200 ms pause (OpenBLAS's workers spin for a while after a call).
std::optional<std::pair<double, double>> TimeMixedRounds(Backend& backend, SekvDecoder& dec, int t,
                                                         int steps, const MixedRequests& r) {
  const int p = static_cast<int>(r.seqs.size()), n = static_cast<int>(r.rows.size());
  const std::vector<SampleDraw> draws(p);
  std::vector<int32_t> next;
  std::vector<std::vector<float>> sekv_logits;
  std::vector<double> two_ms, one_ms;
  int position = t;
  for (int round = 0; round < steps + 2; ++round) {
    const std::vector<int32_t> seq_tokens(p, 3 + round), tokens(n, 3 + round);
    double two = 0, one = 0;
    for (int turn = 0; turn < 2; ++turn) {
      const bool mixed_turn = (turn + round) % 2 == 1;
      std::vector<int> positions(n, position++);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const auto t0 = Clock::now();
      if (mixed_turn) {
        ExternalRows external;
        external.tokens = tokens;
        external.positions = positions;
        external.attention = r.attention;
        if (!backend.DecodeMixed(r.seqs, seq_tokens, draws, &next, external, &sekv_logits).ok()) {
          return std::nullopt;
        }
        one = Ms(t0);
      } else {
        if (!backend.DecodeSample(r.seqs, seq_tokens, draws, &next).ok() ||
            !dec.StepBatch(tokens, positions, r.rows, &sekv_logits).ok()) {
          return std::nullopt;
        }
        two = Ms(t0);
      }
    }
    if (round >= 2) {
      two_ms.push_back(two);
      one_ms.push_back(one);
    }
  }
  return std::make_pair(Median(two_ms), Median(one_ms));
}

// 4. Plain and SEKV requests at once: two steps against one mixed step. 0, or the exit code of
// a failure.
int MeasureMixed(const Options& o, const std::vector<float>& real_surprisal, const CacheShape& ts,
                 std::shared_ptr<const Model> model, SekvDecoder& dec) {
  const int t = o.batch_length;
  std::printf(
      "\nplain and SEKV requests decoding at once, %d tokens each: every round steps them as "
      "two steps (the backend's DecodeSample, then StepBatch) and as one "
      "(Backend::DecodeMixed), alternating which goes first, each after a 200 ms pause; median "
      "of %d rounds after 2 warm-ups\n",
      t, o.steps);
  std::printf("%6s %6s %14s %14s %10s\n", "plain", "sekv", "two_steps_ms", "mixed_ms", "speedup");
  auto backend = CreateBackend(BackendKind::kCpu, std::move(model));
  if (!backend.ok()) return scd::cli::kExitFailure;
  const PrefixKv prefix = RandomPrefix(ts, t, Surprisal(t, real_surprisal, 9));
  const BudgetPlan plan =
      PlanBudget(prefix.surprisal, o.budget, SekvOptions{}, BudgetShares{}, ts.head_dim);
  // The plain requests' context: the same random K/V, appended as an SCD rebuild would.
  ExternalKv kv;
  kv.num_tokens = t;
  kv.k_pre_rope = prefix.k;
  kv.v = prefix.v;
  for (auto [p, n] : o.mixes) {
    MixedRequests r;
    if (!MakeMixedRequests(**backend, ts, prefix, plan, kv, p, n, t + 2 * (o.steps + 2) + 1, &r)) {
      return scd::cli::kExitFailure;
    }
    const std::optional<std::pair<double, double>> ms =
        TimeMixedRounds(**backend, dec, t, o.steps, r);
    if (!ms.has_value()) return scd::cli::kExitFailure;
    const auto [a, b] = *ms;
    std::printf("%6d %6d %14.1f %14.1f %10.2f\n", p, n, a, b, a / b);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  scd::cli::FlagParser flags("scd-sekv-bench", "[flags]");
  AddFlags(flags, &o);
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  if (std::optional<int> exit = CheckFlags(flags, &o)) return *exit;
  std::printf("SEKV at scale (synthetic Llama-3-8B shape, random weights and K/V)\n");
  std::printf("command: %s\n", scd::cli::QuotedCommandLine(argc, argv).c_str());
  std::vector<float> real_surprisal;
  if (int exit = ReadRealSurprisal(flags, o, &real_surprisal)) return exit;

  MeasureMemory(o, real_surprisal);

  const ModelConfig tc = Llama3Shape(o.time_layers, o.vocab);
  std::printf("\ndecode: %d of 32 layers, vocab %d, median of %d steps after 2 warm-up steps\n",
              o.time_layers, o.vocab, o.steps);
  auto model = MakeSyntheticModel(tc, 11);
  auto dec = SekvDecoder::Create(model);
  if (!dec.ok()) return scd::cli::kExitFailure;
  const CacheShape ts = CacheShape::FromConfig(tc);
  if (int exit = MeasureDecode(o, real_surprisal, ts, **dec)) return exit;
  if (!o.batch_sizes.empty()) {
    if (int exit = MeasureBatching(o, real_surprisal, ts, **dec)) return exit;
  }
  if (!o.mixes.empty()) {
    if (int exit = MeasureMixed(o, real_surprisal, ts, model, **dec)) return exit;
  }
  return 0;
}
