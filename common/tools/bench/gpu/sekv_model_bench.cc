// SEKV whole-model decode step: see sekv_model_bench.h.
// Both sides run the same synthetic backend (random BF16 weights drawn on the device), with
// the sliding window off, so that both attend over the whole context:
//   - full KV: a backend sequence whose cache holds `context` positions of N(0, 1)-scale BF16
//     K/V (written straight into the cache, no prefill), then Decode steps;
//   - SEKV: a SekvCache built on the host from `context` positions of N(0, 1) post-RoPE K/V and
//     surprisal -2 log U (U uniform), at the decode daemon's defaults (budget 0.4 through
//     PlanBudget, default router, token-resolution zoom-in with the plan's pins), then
//     GpuSekv (BF16 tier) steps, with the zoom-in on the device (the daemon's default) and
//     then on the host (a second cache, built the same way). The zoom-in expands kExpandRows rows
//     per layer and KV head at every step (τ = 0: every span is a candidate, the gate's α ranks
//     them; then the heaviest tokens), as sekv_step_bench.h assumes a calibrated gate lets through:
//     a fixed, stated amount of CPU-tier work instead of whatever random keys would make the gate
//     do. The expansion buffer is those 64 rows too (the plan sizes it for its own budget), so the
//     device tier comes out below the planned 0.4 of the full cache; it is reported.
// Set-up, with the zoom on the device: a mirror that copies the CPU tier to pinned memory (the
// way before registration) is made and dropped, then the timed one as the decode engine makes
// it: the tier registered (GpuSekv::MapCpuTier), then the mirror; each timed apart.
// Random K/V have no low-rank structure, so the CPU tier is about as large as the context
// itself; its size does not enter the step's time, only the rows expanded do. Steps are
// timed on the host around Decode / GpuSekv::Step, which both return after the logits are on
// the host: 2 warm-ups (the first SEKV step also picks the pins), then the median of 10.
#include "common/tools/bench/gpu/sekv_model_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/parallel_for.h"
#include "common/base/random.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda/backend_access.h"
#include "common/runtime/cuda/op_profiling.h"
#include "common/runtime/cuda/synthetic_backend.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/gpu_sekv.h"
#include "common/sekv/sekv_cache.h"
#include "common/tools/bench/gpu/bench_support.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda_bench {
namespace {

constexpr int kWarmups = 2;
constexpr int kSteps = 10;
constexpr int kProfiledSteps = 3;  // after the timed ones, with the backend's op profile on
constexpr double kBudget = sekv::kDefaultBudget;  // the decode daemon's default
constexpr int kExpandRows = 64;  // per layer, KV head and step (sekv_step_bench.h's figure)
constexpr uint64_t kSeed = 0x5e4b;

// Any token id of the vocabulary (the weights are random).
int32_t StepToken(int i, int vocab) { return 3 + (i * 7919) % (vocab - 3); }

// Runs step(i) for kWarmups + kSteps steps; calls after_warmups() between; returns the median
// milliseconds of the timed steps.
absl::StatusOr<double> TimeSteps(const std::function<absl::Status(int)>& step,
                                 const std::function<void()>& after_warmups) {
  std::vector<double> ms;
  for (int i = 0; i < kWarmups + kSteps; ++i) {
    if (i == kWarmups) after_warmups();
    const auto a = Clock::now();
    SCD_RETURN_IF_ERROR(step(i));
    if (i >= kWarmups) ms.push_back(Seconds(a, Clock::now()) * 1e3);
  }
  return Median(ms);
}

// kProfiledSteps more steps, step(first) onwards, with `backend`'s op profile on (eager steps;
// cuda::SetOpProfiling): per step, the device time of attention (for a GpuSekv step the whole
// of each layer's SEKV attention, and its parts: gate, zoom-in, resident softmax; the rest of
// it, the window's row and the merge, and any wait for the host within it) and of everything
// else from the embedding to the logits.
absl::StatusOr<nlohmann::json> ProfileSteps(Backend& backend,
                                            const std::function<absl::Status(int)>& step,
                                            int first) {
  SCD_RETURN_IF_ERROR(cuda::SetOpProfiling(backend, true));
  absl::Status ran = absl::OkStatus();
  for (int i = 0; i < kProfiledSteps && ran.ok(); ++i) ran = step(first + i);
  const absl::StatusOr<cuda::OpProfile> p = cuda::TakeOpProfile(backend);
  SCD_RETURN_IF_ERROR(cuda::SetOpProfiling(backend, false));
  SCD_RETURN_IF_ERROR(ran);
  SCD_RETURN_IF_ERROR(p.status());
  if (p->passes != kProfiledSteps) {
    return absl::InternalError(
        absl::StrCat("profiled steps: ", p->passes, " passes for ", kProfiledSteps, " steps"));
  }
  auto ms = [&](cuda::OpClass c) { return p->ms[static_cast<int>(c)] / kProfiledSteps; };
  const double gate = ms(cuda::OpClass::kSekvGate), zoom = ms(cuda::OpClass::kSekvZoom),
               resident = ms(cuda::OpClass::kSekvResident);
  const double attention = ms(cuda::OpClass::kAttention) + gate + zoom + resident;
  const double pass = p->pass_ms / kProfiledSteps;
  return nlohmann::json{
      {"steps", kProfiledSteps}, {"attention_ms", attention},    {"sekv_gate_ms", gate},
      {"sekv_zoom_ms", zoom},    {"sekv_resident_ms", resident}, {"other_ms", pass - attention},
      {"pass_ms", pass}};
}

// `context` positions of N(0, 1) post-RoPE K/V in every layer, and surprisal -2 log U.
sekv::PrefixKv RandomPrefix(const ModelConfig& c, int context) {
  const size_t kvd = c.kv_dim();
  sekv::PrefixKv prefix;
  prefix.num_tokens = context;
  prefix.k.resize(c.num_layers);
  prefix.v.resize(c.num_layers);
  ParallelFor(2 * static_cast<size_t>(c.num_layers), [&](size_t i) {
    std::vector<float>& x = i % 2 == 0 ? prefix.k[i / 2] : prefix.v[i / 2];
    x.resize(static_cast<size_t>(context) * kvd);
    FillNormal(x.data(), x.size(), kSeed + 100 + i, 0.0f, 1.0f);
  });
  prefix.surprisal.resize(context);
  FillUniform(prefix.surprisal.data(), context, kSeed + 99, 0.0f, 1.0f);
  for (float& s : prefix.surprisal) s = -2.0f * std::log1p(-s);
  return prefix;
}

// Planned as the decode daemon plans its default tier (BF16 rows, the zoom on the device).
sekv::BudgetPlan DaemonPlan(const ModelConfig& c, const sekv::PrefixKv& prefix) {
  return sekv::PlanBudget(
      prefix.surprisal, kBudget, sekv::SekvOptions{}, sekv::BudgetShares{}, c.head_dim,
      sekv::GpuSekv::PlanOverhead(sekv::CacheShape::FromConfig(c), sekv::SekvOptions{},
                                  sekv::GpuTier::kBf16, sekv::GpuZoom::kDevice));
}

// The plan with the benchmark's fixed zoom-in: kExpandRows rows per layer and KV head, every
// span a candidate.
sekv::SekvOptions BenchOptions(const sekv::BudgetPlan& plan) {
  sekv::SekvOptions o = plan.sekv;
  o.expand_budget = kExpandRows;
  o.cache_tokens = 0;
  o.tau_override = 0.0f;
  return o;
}

// The full-KV side: a sequence of `total` positions whose cache holds `context` positions of
// N(0, 1)-scale BF16 K/V, written straight into it.
absl::StatusOr<std::unique_ptr<Sequence>> FullKvSequence(Backend& backend, const ModelConfig& c,
                                                         int context, int total) {
  const size_t kvd = c.kv_dim();
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, backend.NewSequence(total));
  SCD_ASSIGN_OR_RETURN(cuda::SequenceCache cache, cuda::CudaSequenceCache(backend, *seq));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Stream> stream, cuda::Stream::Create());
  for (int l = 0; l < c.num_layers; ++l) {
    const int64_t at = l * cache.layer_stride, n = int64_t{context} * static_cast<int64_t>(kvd);
    SCD_RETURN_IF_ERROR(
        cuda::FillRandomBf16(cache.k + at, n, kSeed + 2 * l, 1.0f, stream->handle()));
    SCD_RETURN_IF_ERROR(
        cuda::FillRandomBf16(cache.v + at, n, kSeed + 2 * l + 1, 1.0f, stream->handle()));
  }
  SCD_RETURN_IF_ERROR(stream->Synchronize());
  SCD_RETURN_IF_ERROR(cuda::CudaCommitPositions(backend, *seq, context));
  return seq;
}

// What the SEKV runs share: the backend, the model's shape, the context, and the host cache's
// prompt, plan and options.
struct SekvSide {
  Backend& backend;
  const ModelConfig& c;
  int context;
  const sekv::PrefixKv& prefix;
  const sekv::BudgetPlan& plan;
  const sekv::SekvOptions& o;
};

// The way before registration, for the ratio: a mirror that copies the CPU tier to pinned
// memory (a mapping that registers nothing), made and dropped; the seconds it took.
absl::StatusOr<double> PinnedCopySeconds(const SekvSide& side, sekv::SekvCache& sc,
                                         const char* name) {
  const sekv::CpuTierMapping none(sc);
  const auto c0 = Clock::now();
  SCD_ASSIGN_OR_RETURN(
      std::unique_ptr<sekv::GpuSekv> copied,
      sekv::GpuSekv::Create(side.backend, sc, sekv::GpuTier::kBf16, sekv::GpuZoom::kDevice,
                            sekv::GpuSekv::kDefaultWindowSlack, &none));
  const double copy_s = Seconds(c0, Clock::now());
  std::printf(
      "  sekv model context %d, %s zoom: GPU tier with a pinned copy of the CPU tier "
      "%.2f s (%s)\n",
      side.context, name, copy_s, sekv::CpuTierAccessName(copied->cpu_tier_access()));
  return copy_s;
}

// A SEKV run's figures beside its step time and set-up: the rows the zoom-in expanded and the
// fetcher's statistics over the timed steps (from z0, f0 to z1, f1), the tier's structure and
// bytes now.
nlohmann::json SekvRunFigures(const SekvSide& side, const sekv::SekvCache& sc,
                              const sekv::GpuSekv& gpu, const sekv::ZoomStats& z0,
                              const sekv::FetchStats& f0, const sekv::ZoomStats& z1,
                              const sekv::FetchStats& f1) {
  const sekv::MemoryBreakdown m = gpu.Memory();
  const sekv::SpanStore& st = sc.store(0);
  const double rounds = static_cast<double>(kSteps) * side.c.num_layers * side.c.num_kv_heads;
  const long requests = f1.requests - f0.requests;
  return nlohmann::json{
      {"expanded_rows_per_head", (z1.expanded_tokens - z0.expanded_tokens) / rounds},
      {"fetch_hit_rate",
       requests > 0 ? static_cast<double>(f1.hits - f0.hits) / static_cast<double>(requests) : 0},
      {"fetch_wait_ms_per_step", (f1.wait_ms - f0.wait_ms) / kSteps},
      {"anchors", st.num_anchors()},
      {"spans", st.num_spans()},
      {"pins_per_head", sc.options().pin_tokens},
      {"resident_rows_per_head",
       st.num_anchors() + st.num_spans() + st.window_rows() + sc.options().pin_tokens},
      {"sekv_tier_bytes", static_cast<double>(m.gpu())},
      {"full_kv_bytes", static_cast<double>(m.full_kv)},
      {"tier_fraction", m.gpu_ratio()},
      {"cpu_tier_bytes", static_cast<double>(m.cpu_bases)}};
}

// One SEKV run with the zoom-in on the device or the host (a cache built afresh each time: a
// mirror steps its cache): its step time, statistics, bytes and set-up times.
absl::StatusOr<nlohmann::json> RunSekv(const SekvSide& side, sekv::GpuZoom zoom) {
  const char* name = zoom == sekv::GpuZoom::kDevice ? "device" : "host";
  const auto t1 = Clock::now();
  SCD_ASSIGN_OR_RETURN(
      std::unique_ptr<sekv::SekvCache> sc,
      sekv::SekvCache::CreateWithSegmentation(sekv::CacheShape::FromConfig(side.c), side.prefix,
                                              side.plan.segmentation, side.o, nullptr));
  const double cache_s = Seconds(t1, Clock::now());
  double copy_s = 0;
  if (zoom == sekv::GpuZoom::kDevice) {
    SCD_ASSIGN_OR_RETURN(copy_s, PinnedCopySeconds(side, *sc, name));
  }
  const auto t2 = Clock::now();
  // As the decode engine does: the CPU tier registered first (on its build thread), then the
  // mirror.
  std::unique_ptr<sekv::CpuTierMapping> mapping;
  if (zoom == sekv::GpuZoom::kDevice) {
    SCD_ASSIGN_OR_RETURN(mapping, sekv::GpuSekv::MapCpuTier(side.backend, *sc));
  }
  const auto t2m = Clock::now();
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<sekv::GpuSekv> gpu,
                       sekv::GpuSekv::Create(side.backend, *sc, sekv::GpuTier::kBf16, zoom,
                                             sekv::GpuSekv::kDefaultWindowSlack, mapping.get()));
  const auto t3 = Clock::now();
  const char* access = sekv::CpuTierAccessName(gpu->cpu_tier_access());
  std::printf(
      "  sekv model context %d, %s zoom: host SEKV cache %.1f s, CPU tier registered %.2f s, "
      "GPU tier %.1f s (CPU tier read by the device: %s)\n",
      side.context, name, cache_s, Seconds(t2, t2m), Seconds(t2m, t3), access);
  if (!gpu->registration_error().ok()) {
    std::printf("  sekv model context %d: registration refused: %s\n", side.context,
                gpu->registration_error().ToString().c_str());
  }
  std::vector<float> logits;
  auto sekv_step = [&](int i) {
    return gpu->Step(StepToken(i, side.c.vocab_size), side.context + i, &logits);
  };
  sekv::ZoomStats z0;
  sekv::FetchStats f0;
  auto sekv_warm = [&] {  // the statistics of the timed steps only
    z0 = sc->zoom_stats();
    f0 = sc->fetch_stats();
  };
  SCD_ASSIGN_OR_RETURN(const double ms, TimeSteps(sekv_step, sekv_warm));
  const sekv::ZoomStats z1 = sc->zoom_stats();
  const sekv::FetchStats f1 = sc->fetch_stats();
  SCD_ASSIGN_OR_RETURN(nlohmann::json profile,
                       ProfileSteps(side.backend, sekv_step, kWarmups + kSteps));
  nlohmann::json run = SekvRunFigures(side, *sc, *gpu, z0, f0, z1, f1);
  run["ms"] = ms;
  run["setup_s"] = {{"host_cache", cache_s},
                    {"register", Seconds(t2, t2m)},
                    {"gpu_tier", Seconds(t2m, t3)},
                    {"gpu_tier_with_copy", copy_s}};
  run["cpu_tier_access"] = access;
  run["profile"] = profile;
  return run;
}

// The row of one context: the daemon's default path (the device zoom), with the host zoom and
// the full-KV figures beside it; printed.
nlohmann::json SekvModelRow(int context, double full_ms, const nlohmann::json& full_profile,
                            const nlohmann::json& device, const nlohmann::json& host) {
  const double sekv_ms = device["ms"].get<double>(), host_ms = host["ms"].get<double>();
  nlohmann::json x = device;
  x.erase("ms");
  x["context"] = context;
  x["full_ms"] = full_ms;
  x["sekv_ms"] = sekv_ms;
  x["ratio"] = full_ms / sekv_ms;
  x["host_zoom"] = host;
  x["host_zoom_ms"] = host_ms;
  x["device_zoom_speedup"] = host_ms / sekv_ms;
  x["full_profile"] = full_profile;
  // Attention alone, from the profiled steps: full KV's over SEKV's (the device zoom).
  x["attention_ratio"] = full_profile["attention_ms"].get<double>() /
                         std::max(device["profile"]["attention_ms"].get<double>(), 1e-9);
  std::printf(
      "  sekv model context %d: full KV %.3f ms, SEKV %.3f ms per step (full/SEKV %.2f; host "
      "zoom %.3f ms, device zoom %.2fx faster); %.1f rows expanded per layer and KV head; GPU "
      "tier %.2f of full KV\n",
      context, full_ms, sekv_ms, full_ms / sekv_ms, host_ms, host_ms / sekv_ms,
      x["expanded_rows_per_head"].get<double>(), x["tier_fraction"].get<double>());
  std::printf(
      "  sekv model context %d, profiled steps (eager), attention / the rest a step: full KV "
      "%.3f / %.3f ms, SEKV %.3f / %.3f ms, SEKV with the host zoom %.3f / %.3f ms\n",
      context, full_profile["attention_ms"].get<double>(), full_profile["other_ms"].get<double>(),
      device["profile"]["attention_ms"].get<double>(), device["profile"]["other_ms"].get<double>(),
      host["profile"]["attention_ms"].get<double>(), host["profile"]["other_ms"].get<double>());
  return x;
}

// `n` fresh SEKV requests: a host cache each (as its build makes it), and its mirror (a
// mirror's first step picks the cache's pins, once).
struct SekvRequests {
  std::vector<std::unique_ptr<sekv::SekvCache>> caches;
  std::vector<std::unique_ptr<sekv::GpuSekv>> mirrors;
  std::vector<sekv::GpuSekv*> rows;
};

absl::Status MakeSekvRequests(Backend& backend, const ModelConfig& c, const sekv::PrefixKv& prefix,
                              const sekv::BudgetPlan& plan, const sekv::SekvOptions& o, int n,
                              SekvRequests* r) {
  const sekv::CacheShape shape = sekv::CacheShape::FromConfig(c);
  for (int i = 0; i < n; ++i) {
    SCD_ASSIGN_OR_RETURN(
        std::unique_ptr<sekv::SekvCache> sc,
        sekv::SekvCache::CreateWithSegmentation(shape, prefix, plan.segmentation, o, nullptr));
    SCD_ASSIGN_OR_RETURN(
        std::unique_ptr<sekv::GpuSekv> m,
        sekv::GpuSekv::Create(backend, *sc, sekv::GpuTier::kBf16, sekv::GpuZoom::kDevice));
    r->caches.push_back(std::move(sc));
    r->rows.push_back(m.get());
    r->mirrors.push_back(std::move(m));
  }
  return absl::OkStatus();
}

// Rounds of the requests stepped one by one (GpuSekv::Step) and then as one batch
// (GpuSekv::StepBatch); the median milliseconds of each after the warm-ups.
absl::StatusOr<std::pair<double, double>> TimeOneByOneAndBatched(
    const std::vector<sekv::GpuSekv*>& rows, int vocab, std::vector<int>* positions) {
  const int n = static_cast<int>(rows.size());
  std::vector<float> logits;
  std::vector<std::vector<float>> batch_logits;
  std::vector<double> one_ms, batch_ms;
  for (int round = 0; round < kWarmups + kSteps; ++round) {
    const int32_t token = StepToken(round, vocab);
    auto a = Clock::now();
    for (int i = 0; i < n; ++i) {
      SCD_RETURN_IF_ERROR(rows[i]->Step(token, (*positions)[i]++, &logits));
    }
    const double one = Seconds(a, Clock::now()) * 1e3;
    const std::vector<int32_t> tokens(n, StepToken(round + 1, vocab));
    a = Clock::now();
    SCD_RETURN_IF_ERROR(sekv::GpuSekv::StepBatch(rows, tokens, *positions, &batch_logits));
    const double together = Seconds(a, Clock::now()) * 1e3;
    for (int& p : *positions) ++p;
    if (round >= kWarmups) {
      one_ms.push_back(one);
      batch_ms.push_back(together);
    }
  }
  return std::make_pair(Median(one_ms), Median(batch_ms));
}

// As many plain requests beside them (a backend sequence each, the same context appended as an
// SCD rebuild would), each round stepped as two steps (DecodeSample, then StepBatch: the
// weights read twice) and as one (GpuSekv::StepMixed: read once); the median milliseconds of
// each after the warm-ups.
absl::StatusOr<std::pair<double, double>> TimeTwoStepsAndMixed(
    Backend& backend, const ModelConfig& c, const sekv::PrefixKv& prefix, int context,
    const std::vector<sekv::GpuSekv*>& rows, std::vector<int>* positions) {
  const int n = static_cast<int>(rows.size()), rounds = kWarmups + kSteps;
  ExternalKv kv;
  kv.num_tokens = context;
  kv.k_pre_rope = prefix.k;
  kv.v = prefix.v;
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> seqs;
  for (int i = 0; i < n; ++i) {
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq,
                         backend.NewSequence(context + 2 * rounds + 1));
    SCD_RETURN_IF_ERROR(backend.AppendKv(*seq, kv));
    seqs.push_back(seq.get());
    owned.push_back(std::move(seq));
  }
  const std::vector<SampleDraw> draws(n);
  std::vector<int32_t> next;
  std::vector<std::vector<float>> batch_logits;
  std::vector<double> two_ms, mixed_ms;
  for (int round = 0; round < rounds; ++round) {
    const std::vector<int32_t> tokens(n, StepToken(round, c.vocab_size));
    auto t = Clock::now();
    SCD_RETURN_IF_ERROR(backend.DecodeSample(seqs, tokens, draws, &next));
    SCD_RETURN_IF_ERROR(sekv::GpuSekv::StepBatch(rows, tokens, *positions, &batch_logits));
    const double two = Seconds(t, Clock::now()) * 1e3;
    for (int& p : *positions) ++p;
    t = Clock::now();
    SCD_RETURN_IF_ERROR(sekv::GpuSekv::StepMixed(backend, seqs, tokens, draws, &next, rows, tokens,
                                                 *positions, &batch_logits));
    const double mixed = Seconds(t, Clock::now()) * 1e3;
    for (int& p : *positions) ++p;
    if (round >= kWarmups) {
      two_ms.push_back(two);
      mixed_ms.push_back(mixed);
    }
  }
  return std::make_pair(Median(two_ms), Median(mixed_ms));
}

}  // namespace

absl::StatusOr<nlohmann::json> MeasureSekvModelStep(const ModelConfig& config, int context) {
  ModelConfig c = config;
  c.sliding_window = 0;
  const int total = context + kWarmups + kSteps + kProfiledSteps + 1;
  c.max_position_embeddings = std::max(c.max_position_embeddings, total);
  std::printf("  sekv model context %d: building both contexts\n", context);
  const auto t0 = Clock::now();
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                       cuda::CreateSyntheticCudaBackend(c, kSeed));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, FullKvSequence(*backend, c, context, total));

  // SEKV: the host cache at the daemon's budget, then its GPU tier; once with the zoom-in on
  // the device, then (a cache built afresh: a mirror steps its cache) on the host.
  const sekv::PrefixKv prefix = RandomPrefix(c, context);
  const sekv::BudgetPlan plan = DaemonPlan(c, prefix);
  const sekv::SekvOptions o = BenchOptions(plan);
  std::printf("  sekv model context %d: full KV and weights %.1f s\n", context,
              Seconds(t0, Clock::now()));

  std::vector<float> logits;
  Sequence* seqs[] = {seq.get()};
  auto full_step = [&](int i) {
    const int32_t token = StepToken(i, c.vocab_size);
    return backend->Decode(seqs, {&token, 1}, &logits);
  };
  SCD_ASSIGN_OR_RETURN(const double full_ms, TimeSteps(full_step, [] {}));
  SCD_ASSIGN_OR_RETURN(nlohmann::json full_profile,
                       ProfileSteps(*backend, full_step, kWarmups + kSteps));

  const SekvSide side{*backend, c, context, prefix, plan, o};
  SCD_ASSIGN_OR_RETURN(nlohmann::json device, RunSekv(side, sekv::GpuZoom::kDevice));
  SCD_ASSIGN_OR_RETURN(nlohmann::json host, RunSekv(side, sekv::GpuZoom::kHost));
  return SekvModelRow(context, full_ms, full_profile, device, host);
}

absl::StatusOr<nlohmann::json> MeasureSekvBatchSteps(const ModelConfig& config, int context,
                                                     const std::vector<int>& batches) {
  ModelConfig c = config;
  c.sliding_window = 0;
  const int rounds = kWarmups + kSteps;
  c.max_position_embeddings = std::max(c.max_position_embeddings, context + 2 * rounds + 1);
  std::printf("  sekv batch context %d: building the weights\n", context);
  const auto t0 = Clock::now();
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                       cuda::CreateSyntheticCudaBackend(c, kSeed));
  const sekv::PrefixKv prefix = RandomPrefix(c, context);
  const sekv::BudgetPlan plan = DaemonPlan(c, prefix);
  const sekv::SekvOptions o = BenchOptions(plan);
  std::printf("  sekv batch context %d: weights and K/V in %.1f s\n", context,
              Seconds(t0, Clock::now()));
  nlohmann::json out = nlohmann::json::array();
  for (int n : batches) {
    if (n < 1) return absl::InvalidArgumentError("SEKV batch sizes must be at least 1");
    const auto t1 = Clock::now();
    SekvRequests r;
    SCD_RETURN_IF_ERROR(MakeSekvRequests(*backend, c, prefix, plan, o, n, &r));
    std::printf("  sekv batch context %d, %d requests: set up in %.1f s\n", context, n,
                Seconds(t1, Clock::now()));
    std::vector<int> positions(n, context);
    SCD_ASSIGN_OR_RETURN(const auto batched,
                         TimeOneByOneAndBatched(r.rows, c.vocab_size, &positions));
    SCD_ASSIGN_OR_RETURN(const auto mixed,
                         TimeTwoStepsAndMixed(*backend, c, prefix, context, r.rows, &positions));
    const auto [a, b] = batched;
    const auto [m2, m1] = mixed;
    out.push_back({{"batch", n},
                   {"one_by_one_ms", a},
                   {"batched_ms", b},
                   {"one_by_one_tokens_per_s", 1e3 * n / a},
                   {"batched_tokens_per_s", 1e3 * n / b},
                   {"speedup", a / b},
                   {"two_steps_ms", m2},
                   {"mixed_ms", m1},
                   {"mixed_speedup", m2 / m1}});
    std::printf(
        "  sekv batch context %d, %d requests: one by one %.3f ms, batched %.3f ms a step "
        "(%.2fx); with %d plain requests, two steps %.3f ms, one mixed step %.3f ms (%.2fx)\n",
        context, n, a, b, a / b, n, m2, m1, m2 / m1);
  }
  return out;
}

}  // namespace scd::cuda_bench
