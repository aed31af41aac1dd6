// SEKV decode-step benchmark: see sekv_step_bench.h.
// Batch 1, the attention part of one step over all L layers, window 0 on both sides (full
// attention over the context: Mistral's 4096 sliding window is not applied here). Per layer,
// SEKV's GPU tier for a context of N tokens is, per the SEKV paper's proportions:
//   anchors 15% of N, span summaries for the rest (mean span length 8, log_count = log 8, a
//   skip array, all 0), a 64-row window (all BF16, [rows][kv_dim] like the cache; the gate
//   reads the BF16 summary rows the attention reads), and an F32 expansion buffer of 64 rows
//   per KV head; the CPU tier is rank-16 span bases in pinned host memory, read by
//   SpanRebuildRows through unified addressing (a pool of 512 bases per KV head, span s in
//   slot s % 512: only the chosen spans' bases are read, and the whole tier, 1.9 GB per layer
//   at 128K, would not fit in pinned memory for 32 layers). The SEKV step per layer:
//     SekvAttention (out = nullptr: resident LSE) → SekvRouteGate over the spans → α to the
//     host (pinned) → sekv::SelectSpans per KV head (τ calibrated at the first warm-up step so
//     that 16 candidate spans pass, as a calibrated gate lets through a few) → upload the
//     jobs → SpanRebuildRows (64 token rows per KV head, K and V) → SekvAttention with out
//     over [anchors, summaries, window, expansion].
// The full-KV step is DecodeAttention per layer over N positions. Both are timed on the host
// around the L-layer loop (the stream drained before and after), median of kSekvSteps steps
// after kSekvWarmups. Every layer has its own cache when L layers fit (17.2 GB of full KV at
// 128K); otherwise one layer's cache is read L times (the same kernel cost per layer; the HBM
// traffic stays real, since a layer's 134 MB of KV at 32K exceeds the L2).
#include "common/tools/bench/gpu/sekv_step_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/sekv/zoom_router.h"
#include "common/tools/bench/gpu/bench_support.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda_bench {
namespace {

constexpr double kSekvAnchorFraction = 0.15;
constexpr int kSekvSpanLength = 8;
constexpr int kSekvWindow = 64;
constexpr int kSekvExpandRows = 64;      // expansion rows per layer and KV head
constexpr int kSekvCandidateSpans = 16;  // candidate_factor 2 × (64 rows / 8 per span)
constexpr int kSekvRouteDim = 32;
constexpr int kSekvBasisRank = 16;
constexpr int kSekvBasisSlots = 512;  // pinned bases per KV head; span s uses slot s % 512
constexpr int kSekvWarmups = 2;
constexpr int kSekvSteps = 10;

struct SekvShape {
  int context = 0, anchors = 0, spans = 0, window = 0;
  int resident = 0;  // anchors + spans + window: rows of the BF16 tier
  int max_rows = 0;  // resident + expansion: entries per KV head in the final softmax
};

SekvShape SekvShapeFor(int context) {
  SekvShape s;
  s.context = context;
  s.anchors = static_cast<int>(std::lround(kSekvAnchorFraction * context));
  s.window = std::min(kSekvWindow, context - s.anchors);
  s.spans = (context - s.anchors - s.window) / kSekvSpanLength;
  s.resident = s.anchors + s.spans + s.window;
  s.max_rows = s.resident + kSekvExpandRows;
  return s;
}

// Device bytes of one layer's SEKV GPU tier (see above) and of its full KV cache.
double SekvTierBytes(const ModelConfig& c, const SekvShape& s) {
  const double kv = c.kv_dim(), g = c.num_kv_heads;
  return s.resident * kv * 2 * 2                        // BF16 K and V
         + g * s.spans * (4 + 4 + 1)                    // log_count, remaining, skip
         + 2.0 * g * kSekvExpandRows * c.head_dim * 4;  // F32 expansion K and V
}
double FullKvBytes(const ModelConfig& c, int context) {
  return static_cast<double>(context) * c.kv_dim() * 2 * 2;
}

struct SekvBench {
  int layers = 0;  // layers with their own cache: L, or 1 when L do not fit
  // Full KV: [layers][N][kv_dim] BF16, and the one-sequence KvCacheTable's device arrays.
  cuda::DeviceBuffer full_k, full_v, table_k, table_v, table_stride, length;
  // SEKV GPU tier, per layer: BF16 [resident][kv_dim] (anchors | summaries | window), the
  // [G][spans] log_count / remaining / skip.
  cuda::DeviceBuffer res_k, res_v, log_count, remaining, skip;
  cuda::DeviceBuffer seg_resident, seg_all;  // AttentionSegment [layers][G][3] and [layers][G][4]
  // Per model layer (all L): q [H][hd], routing projections [G][route_dim][hd], gates [G].
  cuda::DeviceBuffer q, p_q, p_k, gates;
  // Scratch of a step.
  cuda::DeviceBuffer lse, out, workspace, full_workspace, alpha, expand_k, expand_v, jobs;
  int64_t workspace_floats = 0, full_workspace_floats = 0;
  cuda::PinnedBuffer alpha_host, jobs_host, bases;
  std::vector<int> lengths;  // [spans], kSekvSpanLength each (SelectSpans' token counts)
  std::vector<float> tau;    // [L][G]
};

size_t BasisFloats(int head_dim) {
  return size_t{kSekvSpanLength} * kSekvBasisRank + size_t{kSekvBasisRank} * head_dim;
}

absl::Status Alloc(cuda::DeviceBuffer* buf, double bytes, absl::string_view what) {
  SCD_ASSIGN_OR_RETURN(*buf, cuda::DeviceBuffer::Allocate(static_cast<size_t>(bytes), what));
  return absl::OkStatus();
}

// The full cache and the resident tier of `layers` layers, unit-scale keys and values drawn on
// the device; the resident tier's summary counts; the full cache's one-sequence table.
absl::Status BuildSekvCaches(const ModelConfig& c, const SekvShape& sh, int layers,
                             cuda::StreamHandle h, SekvBench* b) {
  const int64_t kv = c.kv_dim(), g_count = c.num_kv_heads, n = sh.context;
  const double bf16 = sizeof(cuda::Bf16);
  SCD_RETURN_IF_ERROR(Alloc(&b->full_k, bf16 * layers * n * kv, "full K"));
  SCD_RETURN_IF_ERROR(Alloc(&b->full_v, bf16 * layers * n * kv, "full V"));
  SCD_RETURN_IF_ERROR(Alloc(&b->res_k, bf16 * layers * sh.resident * kv, "sekv K"));
  SCD_RETURN_IF_ERROR(Alloc(&b->res_v, bf16 * layers * sh.resident * kv, "sekv V"));
  const int64_t meta = int64_t{layers} * g_count * sh.spans;
  SCD_RETURN_IF_ERROR(Alloc(&b->log_count, 4.0 * meta, "sekv log_count"));
  SCD_RETURN_IF_ERROR(Alloc(&b->skip, 1.0 * meta, "sekv skip"));
  SCD_ASSIGN_OR_RETURN(b->remaining,
                       Upload(std::vector<int32_t>(meta, kSekvSpanLength), "sekv remaining"));

  SCD_RETURN_IF_ERROR(cuda::FillRandomBf16(b->full_k.as<cuda::Bf16>(), layers * n * kv, 11, 1, h));
  SCD_RETURN_IF_ERROR(cuda::FillRandomBf16(b->full_v.as<cuda::Bf16>(), layers * n * kv, 12, 1, h));
  SCD_RETURN_IF_ERROR(
      cuda::FillRandomBf16(b->res_k.as<cuda::Bf16>(), layers * sh.resident * kv, 13, 1, h));
  SCD_RETURN_IF_ERROR(
      cuda::FillRandomBf16(b->res_v.as<cuda::Bf16>(), layers * sh.resident * kv, 14, 1, h));
  SCD_RETURN_IF_ERROR(cuda::FillF32(b->log_count.as<float>(), meta,
                                    std::log(static_cast<float>(kSekvSpanLength)), h));
  SCD_RETURN_IF_ERROR(cuda::SetDeviceBytes(b->skip.data(), 0, meta, h));

  SCD_ASSIGN_OR_RETURN(b->table_k,
                       Upload(std::vector<cuda::Bf16*>{b->full_k.as<cuda::Bf16>()}, "table K"));
  SCD_ASSIGN_OR_RETURN(b->table_v,
                       Upload(std::vector<cuda::Bf16*>{b->full_v.as<cuda::Bf16>()}, "table V"));
  SCD_ASSIGN_OR_RETURN(b->table_stride, Upload(std::vector<int64_t>{n * kv}, "table stride"));
  SCD_ASSIGN_OR_RETURN(b->length, Upload(std::vector<int32_t>{static_cast<int32_t>(n)}, "length"));
  return absl::OkStatus();
}

// Segments: per layer and KV head, [anchors, summaries, window] (the resident pass) and the
// same plus the expansion rows (the final softmax).
absl::Status BuildSekvSegments(const ModelConfig& c, const SekvShape& sh, int layers,
                               cuda::StreamHandle h, SekvBench* b) {
  const int64_t kv = c.kv_dim(), g_count = c.num_kv_heads, hd = c.head_dim;
  SCD_RETURN_IF_ERROR(Alloc(&b->expand_k, 4.0 * g_count * kSekvExpandRows * hd, "expand K"));
  SCD_RETURN_IF_ERROR(Alloc(&b->expand_v, 4.0 * g_count * kSekvExpandRows * hd, "expand V"));
  SCD_RETURN_IF_ERROR(cuda::SetDeviceBytes(b->expand_k.data(), 0, b->expand_k.size(), h));
  SCD_RETURN_IF_ERROR(cuda::SetDeviceBytes(b->expand_v.data(), 0, b->expand_v.size(), h));
  std::vector<cuda::AttentionSegment> resident, all;
  for (int l = 0; l < layers; ++l) {
    for (int g = 0; g < g_count; ++g) {
      const int64_t base = int64_t{l} * sh.resident * kv + g * hd;
      const int64_t meta_row = (int64_t{l} * g_count + g) * sh.spans;
      auto bf16_rows = [&](int64_t first_row, int rows) {
        cuda::AttentionSegment s;
        s.k = b->res_k.as<cuda::Bf16>() + base + first_row * kv;
        s.v = b->res_v.as<cuda::Bf16>() + base + first_row * kv;
        s.rows = rows;
        s.stride = static_cast<int32_t>(kv);
        s.type = cuda::KvType::kBf16;
        return s;
      };
      cuda::AttentionSegment summaries = bf16_rows(sh.anchors, sh.spans);
      summaries.log_count = b->log_count.as<float>() + meta_row;
      summaries.skip = b->skip.as<uint8_t>() + meta_row;
      cuda::AttentionSegment expansion;
      expansion.k = b->expand_k.as<float>() + int64_t{g} * kSekvExpandRows * hd;
      expansion.v = b->expand_v.as<float>() + int64_t{g} * kSekvExpandRows * hd;
      expansion.rows = kSekvExpandRows;
      expansion.stride = static_cast<int32_t>(hd);
      expansion.type = cuda::KvType::kF32;
      const cuda::AttentionSegment window = bf16_rows(sh.anchors + sh.spans, sh.window);
      for (const cuda::AttentionSegment& s : {bf16_rows(0, sh.anchors), summaries, window}) {
        resident.push_back(s);
        all.push_back(s);
      }
      all.push_back(expansion);
    }
  }
  SCD_ASSIGN_OR_RETURN(b->seg_resident, Upload(resident, "segments"));
  SCD_ASSIGN_OR_RETURN(b->seg_all, Upload(all, "segments"));
  return absl::OkStatus();
}

// Queries N(0, 1) and routing projections N(0, 0.05²): the gate's bilinear term then has a
// standard deviation of 0.05² · √(route_dim · head_dim²) ≈ 1.8 next to ŝ − LSE ≈ −9 at
// 32K-128K entries, so α stays well inside (0, 1) and τ separates the spans.
absl::Status BuildSekvRouting(const ModelConfig& c, SekvBench* b) {
  const int64_t g_count = c.num_kv_heads, hd = c.head_dim, L = c.num_layers, H = c.num_heads;
  SCD_ASSIGN_OR_RETURN(b->q, Upload(Normal(L * H * hd, 21, 1.0f), "q"));
  SCD_ASSIGN_OR_RETURN(b->p_q, Upload(Normal(L * g_count * kSekvRouteDim * hd, 22, 0.05f), "p_q"));
  SCD_ASSIGN_OR_RETURN(b->p_k, Upload(Normal(L * g_count * kSekvRouteDim * hd, 23, 0.05f), "p_k"));
  cuda::RouterGateParams gate;
  gate.w_size = 0.5f;
  gate.w_share = 1.0f;
  SCD_ASSIGN_OR_RETURN(b->gates,
                       Upload(std::vector<cuda::RouterGateParams>(L * g_count, gate), "gates"));
  return absl::OkStatus();
}

// A step's scratch: the attention workspaces, the gate's α, the rebuild jobs, and the CPU tier:
// [G][slot][K, V] bases, each U_rΣ_r [8, 16] then V_rᵀ [16, head_dim].
absl::Status BuildSekvScratch(const ModelConfig& c, const SekvShape& sh, SekvBench* b) {
  const int64_t g_count = c.num_kv_heads, hd = c.head_dim, n = sh.context, L = c.num_layers;
  const int64_t H = c.num_heads;
  b->workspace_floats = cuda::SekvAttentionWorkspaceFloats(H, hd, sh.max_rows);
  b->full_workspace_floats = cuda::DecodeAttentionWorkspaceFloats(1, n, H, g_count, hd);
  SCD_RETURN_IF_ERROR(Alloc(&b->lse, 4.0 * H, "lse"));
  SCD_RETURN_IF_ERROR(Alloc(&b->out, 4.0 * H * hd, "out"));
  SCD_RETURN_IF_ERROR(Alloc(&b->workspace, 4.0 * std::max<int64_t>(1, b->workspace_floats), "ws"));
  SCD_RETURN_IF_ERROR(
      Alloc(&b->full_workspace, 4.0 * std::max<int64_t>(1, b->full_workspace_floats), "ws"));
  SCD_RETURN_IF_ERROR(Alloc(&b->alpha, 4.0 * g_count * sh.spans, "alpha"));
  const int64_t max_jobs = 2 * g_count * kSekvExpandRows;
  SCD_RETURN_IF_ERROR(Alloc(&b->jobs, 1.0 * sizeof(cuda::RebuildJob) * max_jobs, "jobs"));
  SCD_RETURN_IF_ERROR(b->alpha_host.Reserve(sizeof(float) * g_count * sh.spans));
  SCD_RETURN_IF_ERROR(b->jobs_host.Reserve(sizeof(cuda::RebuildJob) * max_jobs));
  const size_t basis_floats = BasisFloats(c.head_dim);
  const size_t bases_floats = size_t{2} * g_count * kSekvBasisSlots * basis_floats;
  SCD_RETURN_IF_ERROR(b->bases.Reserve(sizeof(float) * bases_floats));
  FillNormal(b->bases.as<float>(), bases_floats, 24, 0.0f, 0.25f);
  b->lengths.assign(sh.spans, kSekvSpanLength);
  b->tau.assign(L * g_count, 0.0f);
  return absl::OkStatus();
}

absl::Status BuildSekvBench(const ModelConfig& c, const SekvShape& sh, int layers,
                            cuda::StreamHandle h, SekvBench* b) {
  b->layers = layers;
  SCD_RETURN_IF_ERROR(BuildSekvCaches(c, sh, layers, h, b));
  SCD_RETURN_IF_ERROR(BuildSekvSegments(c, sh, layers, h, b));
  SCD_RETURN_IF_ERROR(BuildSekvRouting(c, b));
  SCD_RETURN_IF_ERROR(BuildSekvScratch(c, sh, b));
  return cuda::SynchronizeStream(h);
}

// τ that lets the kSekvCandidateSpans largest α through (α > τ).
float CalibratedTau(absl::Span<const float> alpha) {
  if (alpha.size() <= static_cast<size_t>(kSekvCandidateSpans)) return -1.0f;
  std::vector<float> a(alpha.begin(), alpha.end());
  std::nth_element(a.begin(), a.begin() + kSekvCandidateSpans, a.end(), std::greater<float>());
  return a[kSekvCandidateSpans];
}

// One full-KV step (attention of all L layers); host ms.
absl::StatusOr<double> FullKvStep(const ModelConfig& c, const SekvShape& sh, SekvBench& b,
                                  cuda::StreamHandle h) {
  const int H = c.num_heads, hd = c.head_dim;
  cuda::KvCacheTable table;
  table.k = b.table_k.as<cuda::Bf16* const>();
  table.v = b.table_v.as<cuda::Bf16* const>();
  table.layer_stride = b.table_stride.as<const int64_t>();
  const auto t0 = Clock::now();
  for (int l = 0; l < c.num_layers; ++l) {
    SCD_RETURN_IF_ERROR(cuda::DecodeAttention(
        b.q.as<float>() + int64_t{l} * H * hd, int64_t{H} * hd, table, l % b.layers,
        b.length.as<int32_t>(), 1, sh.context, H, c.num_kv_heads, hd, /*window=*/0,
        cuda::DecodeImpl::kAuto, b.out.as<float>(), int64_t{H} * hd, b.full_workspace.as<float>(),
        b.full_workspace_floats, h));
  }
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(h));
  return Seconds(t0, Clock::now()) * 1e3;
}

// One SEKV step (attention of all L layers, see above); host ms. Adds the host selection time
// to *select_ms and the rebuilt rows to *expanded_rows; `calibrate` sets τ from this step's α.
absl::StatusOr<double> SekvStep(const ModelConfig& c, const SekvShape& sh, SekvBench& b,
                                bool calibrate, cuda::StreamHandle h, double* select_ms,
                                int64_t* expanded_rows) {
  const int H = c.num_heads, G = c.num_kv_heads, hd = c.head_dim;
  const size_t basis_floats = BasisFloats(hd);
  const int64_t route = int64_t{G} * kSekvRouteDim * hd;
  const auto t0 = Clock::now();
  for (int l = 0; l < c.num_layers; ++l) {
    const int li = l % b.layers;
    const float* q = b.q.as<float>() + int64_t{l} * H * hd;
    const auto* seg_resident = b.seg_resident.as<cuda::AttentionSegment>() + int64_t{li} * G * 3;
    const auto* seg_all = b.seg_all.as<cuda::AttentionSegment>() + int64_t{li} * G * 4;
    const int64_t meta = int64_t{li} * G * sh.spans;
    SCD_RETURN_IF_ERROR(cuda::SekvAttention(q, seg_resident, 3, H, G, hd, sh.max_rows,
                                            cuda::DecodeImpl::kAuto, nullptr, b.lse.as<float>(),
                                            b.workspace.as<float>(), b.workspace_floats, h));
    SCD_RETURN_IF_ERROR(cuda::SekvRouteGate(
        q, b.p_q.as<float>() + l * route, b.p_k.as<float>() + l * route, kSekvRouteDim,
        // The summary rows sit after the anchors of the layer's BF16 tier.
        b.res_k.as<cuda::Bf16>() + (int64_t{li} * sh.resident + sh.anchors) * c.kv_dim(),
        cuda::KvType::kBf16, c.kv_dim(), b.log_count.as<float>() + meta,
        b.remaining.as<int32_t>() + meta, b.gates.as<cuda::RouterGateParams>() + int64_t{l} * G,
        b.lse.as<float>(), sh.spans, H, G, hd, b.alpha.as<float>(), h));
    SCD_RETURN_IF_ERROR(
        cuda::CopyToHost(b.alpha_host.data(), b.alpha.data(), sizeof(float) * G * sh.spans, h));
    SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(h));

    const auto s0 = Clock::now();
    cuda::RebuildJob* jobs = b.jobs_host.as<cuda::RebuildJob>();
    int count = 0;
    for (int g = 0; g < G; ++g) {
      const absl::Span<const float> alpha(b.alpha_host.as<float>() + int64_t{g} * sh.spans,
                                          sh.spans);
      float& tau = b.tau[l * G + g];
      if (calibrate) tau = CalibratedTau(alpha);
      int row = 0;
      for (int s : sekv::SelectSpans(alpha, b.lengths, tau, kSekvExpandRows)) {
        const float* basis =
            b.bases.as<float>() +
            (size_t{2} * g * kSekvBasisSlots + 2 * (s % kSekvBasisSlots)) * basis_floats;
        for (int i = 0; i < kSekvSpanLength && row < kSekvExpandRows; ++i, ++row) {
          for (int part = 0; part < 2; ++part) {  // K, then V
            const float* us_vt = basis + part * basis_floats;
            cuda::DeviceBuffer& dst = part == 0 ? b.expand_k : b.expand_v;
            cuda::RebuildJob& job = jobs[count++];
            job.us_row = us_vt + i * kSekvBasisRank;
            job.vt = us_vt + kSekvSpanLength * kSekvBasisRank;
            job.out = dst.as<float>() + (int64_t{g} * kSekvExpandRows + row) * hd;
            job.rank = kSekvBasisRank;
          }
        }
      }
      *expanded_rows += row;
    }
    *select_ms += Seconds(s0, Clock::now()) * 1e3;

    if (count > 0) {
      SCD_RETURN_IF_ERROR(
          cuda::CopyToDevice(b.jobs.data(), jobs, sizeof(cuda::RebuildJob) * count, h));
      SCD_RETURN_IF_ERROR(cuda::SpanRebuildRows(b.jobs.as<cuda::RebuildJob>(), count, hd, h));
    }
    SCD_RETURN_IF_ERROR(cuda::SekvAttention(q, seg_all, 4, H, G, hd, sh.max_rows,
                                            cuda::DecodeImpl::kAuto, b.out.as<float>(), nullptr,
                                            b.workspace.as<float>(), b.workspace_floats, h));
  }
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(h));
  return Seconds(t0, Clock::now()) * 1e3;
}

}  // namespace

absl::StatusOr<nlohmann::json> MeasureSekvStep(const ModelConfig& c, int context) {
  const SekvShape sh = SekvShapeFor(context);
  std::printf(
      "  sekv context %d: per layer and KV head %d anchors + %d span summaries + %d window + %d "
      "expansion rows vs %d full-KV rows; %d warm-up + median of %d steps each\n",
      context, sh.anchors, sh.spans, sh.window, kSekvExpandRows, context, kSekvWarmups, kSekvSteps);
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Stream> stream, cuda::Stream::Create());
  const cuda::StreamHandle h = stream->handle();
  auto b = std::make_unique<SekvBench>();
  absl::Status built = BuildSekvBench(c, sh, c.num_layers, h, b.get());
  if (absl::IsResourceExhausted(built)) {
    std::printf("  sekv context %d: %d layers of caches do not fit (%s); one layer read %d times\n",
                context, c.num_layers, std::string(built.message()).c_str(), c.num_layers);
    b = std::make_unique<SekvBench>();
    built = BuildSekvBench(c, sh, 1, h, b.get());
  }
  SCD_RETURN_IF_ERROR(built);

  std::vector<double> full, sekv, select;
  int64_t expanded = 0;
  for (int step = 0; step < kSekvWarmups + kSekvSteps; ++step) {
    SCD_ASSIGN_OR_RETURN(const double ms, FullKvStep(c, sh, *b, h));
    if (step >= kSekvWarmups) full.push_back(ms);
  }
  for (int step = 0; step < kSekvWarmups + kSekvSteps; ++step) {
    double select_ms = 0;
    int64_t rows = 0;
    SCD_ASSIGN_OR_RETURN(const double ms,
                         SekvStep(c, sh, *b, /*calibrate=*/step == 0, h, &select_ms, &rows));
    if (step >= kSekvWarmups) {
      sekv.push_back(ms);
      select.push_back(select_ms);
      expanded += rows;
    }
  }
  const double full_ms = Median(full), sekv_ms = Median(sekv);
  if (!(full_ms > 0 && sekv_ms > 0)) return absl::InternalError("a step took no time");
  const double full_bytes = c.num_layers * FullKvBytes(c, context);
  const double tier_bytes = c.num_layers * SekvTierBytes(c, sh);
  const double rows_per_head =
      static_cast<double>(expanded) / (kSekvSteps * c.num_layers * c.num_kv_heads);
  std::printf(
      "  sekv context %6d (%d layer caches): full KV %7.3f ms/step (%5.0f GB/s), SEKV %7.3f "
      "ms/step (host select %.3f ms), full/SEKV %.2fx; %d entries per KV head vs %d, GPU tier "
      "%.2f GB vs %.2f GB (%.2f); %.1f rows rebuilt per head and layer\n",
      context, b->layers, full_ms, full_bytes / (full_ms * 1e-3) / 1e9, sekv_ms, Median(select),
      full_ms / sekv_ms, sh.max_rows, context, tier_bytes / 1e9, full_bytes / 1e9,
      tier_bytes / full_bytes, rows_per_head);
  return nlohmann::json{{"context", context},
                        {"layer_caches", b->layers},
                        {"anchors", sh.anchors},
                        {"spans", sh.spans},
                        {"window_rows", sh.window},
                        {"expand_rows", kSekvExpandRows},
                        {"entries_per_head", sh.max_rows},
                        {"rows_rebuilt_per_head", rows_per_head},
                        {"full_ms", full_ms},
                        {"full_hbm_gbps", full_bytes / (full_ms * 1e-3) / 1e9},
                        {"sekv_ms", sekv_ms},
                        {"select_ms", Median(select)},
                        {"ratio", full_ms / sekv_ms},
                        {"full_kv_bytes", full_bytes},
                        {"sekv_tier_bytes", tier_bytes},
                        {"tier_fraction", tier_bytes / full_bytes}};
}

}  // namespace scd::cuda_bench
