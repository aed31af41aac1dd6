// Kernels alone against their alternatives (see kernel_bench.h).
#include "common/tools/bench/gpu/kernel_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/tools/bench/gpu/bench_support.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda_bench {
namespace {

// Copies of a `bytes` operand to cycle through so that no call finds it in L2 (50 MB on an
// H100/H200): enough for 400 MB, at least 2 (1 with --quick).
int CopiesPastL2(bool quick, size_t bytes) {
  return quick ? 1 : static_cast<int>(std::max<size_t>(2, (size_t{400} << 20) / bytes));
}

}  // namespace

// Decode-sized projections (m rows against a 7-8B model's weight shapes).
absl::StatusOr<nlohmann::json> MeasureSmallBatch(bool quick, double copy_gbps) {
  std::printf("[small batch] Linear (LinearSmallBatch) against cuBLAS, m rows, best of 5\n");
  SCD_ASSIGN_OR_RETURN(const Rig rig, MakeRig(/*with_gemm=*/true));
  const cuda::StreamHandle h = rig.handle();
  struct Shape {
    const char* name;
    int n, k;
  };
  const std::vector<Shape> shapes = quick ? std::vector<Shape>{{"toy", 96, 256}}
                                          : std::vector<Shape>{{"qkv", 6144, 4096},
                                                               {"o", 4096, 4096},
                                                               {"gate_up", 28672, 4096},
                                                               {"down", 4096, 14336}};
  const std::vector<int> rows = {1, 4, cuda::kSmallBatchMaxRows};
  nlohmann::json out = nlohmann::json::array();
  for (const Shape& s : shapes) {
    const size_t w_bytes = size_t{2} * s.n * s.k;
    const int copies = CopiesPastL2(quick, w_bytes);
    SCD_ASSIGN_OR_RETURN(auto w, cuda::DeviceBuffer::Allocate(w_bytes * copies, "small batch w"));
    SCD_ASSIGN_OR_RETURN(
        auto x, cuda::DeviceBuffer::Allocate(size_t{2} * cuda::kSmallBatchMaxRows * s.k, "x"));
    SCD_ASSIGN_OR_RETURN(
        auto y, cuda::DeviceBuffer::Allocate(size_t{4} * cuda::kSmallBatchMaxRows * s.n, "y"));
    SCD_RETURN_IF_ERROR(
        cuda::FillRandomBf16(w.as<cuda::Bf16>(), int64_t{s.n} * s.k * copies, 3, 0.02f, h));
    SCD_RETURN_IF_ERROR(cuda::FillRandomBf16(x.as<cuda::Bf16>(),
                                             int64_t{cuda::kSmallBatchMaxRows} * s.k, 4, 1.0f, h));
    auto weights = [&](int i) {
      return w.as<cuda::Bf16>() + static_cast<size_t>(i % copies) * s.n * s.k;
    };
    for (int m : rows) {
      SCD_ASSIGN_OR_RETURN(const float ours, BestMsPerCall(rig, 2 * copies, [&](int i) {
                             return rig.gemm->Linear(x.as<cuda::Bf16>(), weights(i), y.as<float>(),
                                                     m, s.n, s.k);
                           }));
      SCD_ASSIGN_OR_RETURN(const float cublas, BestMsPerCall(rig, 2 * copies, [&](int i) {
                             return rig.gemm->LinearCublas(x.as<cuda::Bf16>(), weights(i),
                                                           y.as<float>(), m, s.n, s.k);
                           }));
      const double gbps = w_bytes / (ours * 1e-3) / 1e9;
      const double cublas_gbps = w_bytes / (cublas * 1e-3) / 1e9;
      std::printf(
          "  %-8s n %-6d k %-6d m %d: %7.1f us %6.0f GB/s (%.2f of copy); cuBLAS %7.1f us "
          "%6.0f GB/s (%.2f); small_batch_vs_cublas=%.2f\n",
          s.name, s.n, s.k, m, ours * 1e3, gbps, gbps / copy_gbps, cublas * 1e3, cublas_gbps,
          cublas_gbps / copy_gbps, cublas / ours);
      out.push_back({{"shape", s.name},
                     {"n", s.n},
                     {"k", s.k},
                     {"m", m},
                     {"us", ours * 1e3},
                     {"gbps", gbps},
                     {"vs_copy", gbps / copy_gbps},
                     {"cublas_us", cublas * 1e3},
                     {"cublas_gbps", cublas_gbps},
                     {"cublas_vs_copy", cublas_gbps / copy_gbps},
                     {"speedup", cublas / ours}});
    }
  }
  return out;
}

// Prefill attention alone (32 query heads over 8 KV heads of 128, causal, no window). TFLOP/s
// counts the causal half of Q·Kᵀ and P·V (4 · T²/2 · head_dim · heads).
absl::StatusOr<nlohmann::json> MeasurePrefillAttention(bool quick, double gemm_peak) {
  std::printf("[attention] prefill attention alone, WMMA (kAuto) and mma.sync, best of 5\n");
  SCD_ASSIGN_OR_RETURN(const Rig rig, MakeRig(/*with_gemm=*/false));
  const cuda::StreamHandle h = rig.handle();
  const int heads = quick ? 4 : 32, kv_heads = quick ? 2 : 8, hd = 128;
  nlohmann::json out = nlohmann::json::array();
  for (int t : quick ? std::vector<int>{128} : std::vector<int>{4096, 16384}) {
    SCD_ASSIGN_OR_RETURN(auto q,
                         cuda::DeviceBuffer::Allocate(size_t{4} * t * heads * hd, "attention q"));
    SCD_ASSIGN_OR_RETURN(
        auto kv, cuda::DeviceBuffer::Allocate(size_t{2} * 2 * t * kv_heads * hd, "attention kv"));
    SCD_ASSIGN_OR_RETURN(auto o,
                         cuda::DeviceBuffer::Allocate(size_t{4} * t * heads * hd, "attention out"));
    const int64_t kv_count = int64_t{t} * kv_heads * hd;
    SCD_RETURN_IF_ERROR(cuda::FillRandomBf16(kv.as<cuda::Bf16>(), 2 * kv_count, 5, 1.0f, h));
    SCD_RETURN_IF_ERROR(cuda::FillF32(q.as<float>(), int64_t{t} * heads * hd, 0.05f, h));
    auto time = [&](cuda::AttentionImpl impl) {
      return BestMsPerCall(rig, 1, [&](int) {
        return cuda::PrefillAttention(q.as<float>(), heads * hd, kv.as<cuda::Bf16>(),
                                      kv.as<cuda::Bf16>() + kv_count, o.as<float>(), heads * hd, t,
                                      0, heads, kv_heads, hd, 0, impl, h);
      });
    };
    SCD_ASSIGN_OR_RETURN(const float wmma, time(cuda::AttentionImpl::kAuto));
    SCD_ASSIGN_OR_RETURN(const float mma, time(cuda::AttentionImpl::kTensorCoreMma));
    const double flops = 4.0 * t * (t / 2.0) * hd * heads;
    const double wmma_tflops = flops / (wmma * 1e-3) / 1e12,
                 mma_tflops = flops / (mma * 1e-3) / 1e12;
    std::printf(
        "  tokens %6d: WMMA %9.3f ms %7.1f TFLOP/s (%.3f of GEMM peak); mma.sync %9.3f ms "
        "%7.1f TFLOP/s (%.3f); mma_vs_wmma=%.2f\n",
        t, wmma, wmma_tflops, wmma_tflops / gemm_peak, mma, mma_tflops, mma_tflops / gemm_peak,
        wmma / mma);
    out.push_back({{"tokens", t},
                   {"wmma_ms", wmma},
                   {"wmma_tflops", wmma_tflops},
                   {"wmma_vs_gemm_peak", wmma_tflops / gemm_peak},
                   {"mma_ms", mma},
                   {"mma_tflops", mma_tflops},
                   {"mma_vs_gemm_peak", mma_tflops / gemm_peak},
                   {"mma_speedup", wmma / mma}});
  }
  return out;
}

// Decode attention alone (32 query heads over 8 KV heads of 128, one query per sequence): the
// vectorized and the generic split kernel over `batch` caches of `context` positions. The
// caches hold several layers, cycled call by call, so that no call reads K/V from L2.
absl::StatusOr<nlohmann::json> MeasureDecodeAttention(bool quick, double copy_gbps) {
  std::printf("[attention] decode attention alone, vectorized (kAuto) and generic, best of 5\n");
  SCD_ASSIGN_OR_RETURN(const Rig rig, MakeRig(/*with_gemm=*/false));
  const cuda::StreamHandle h = rig.handle();
  const int heads = quick ? 4 : 32, kv_heads = quick ? 2 : 8, hd = quick ? 64 : 128;
  const int kv_dim = kv_heads * hd;
  struct Shape {
    int batch, context;
  };
  const std::vector<Shape> shapes = quick ? std::vector<Shape>{{1, 256}, {2, 130}}
                                          : std::vector<Shape>{{1, 4096}, {1, 32768}, {32, 4096}};
  nlohmann::json out = nlohmann::json::array();
  for (const Shape& s : shapes) {
    const size_t layer_bytes = size_t{2} * 2 * s.batch * s.context * kv_dim;  // K and V
    const int layers = CopiesPastL2(quick, layer_bytes);
    const int64_t per_seq = int64_t{layers} * s.context * kv_dim;  // one sequence's K
    SCD_ASSIGN_OR_RETURN(auto kv, cuda::DeviceBuffer::Allocate(
                                      sizeof(cuda::Bf16) * 2 * s.batch * per_seq, "decode kv"));
    SCD_RETURN_IF_ERROR(
        cuda::FillRandomBf16(kv.as<cuda::Bf16>(), 2 * s.batch * per_seq, 6, 1.0f, h));
    std::vector<cuda::Bf16*> k_ptrs, v_ptrs;
    for (int b = 0; b < s.batch; ++b) {
      k_ptrs.push_back(kv.as<cuda::Bf16>() + b * per_seq);
      v_ptrs.push_back(kv.as<cuda::Bf16>() + (s.batch + b) * per_seq);
    }
    SCD_ASSIGN_OR_RETURN(auto k_table, Upload(k_ptrs, "decode k table"));
    SCD_ASSIGN_OR_RETURN(auto v_table, Upload(v_ptrs, "decode v table"));
    SCD_ASSIGN_OR_RETURN(
        auto strides,
        Upload(std::vector<int64_t>(s.batch, int64_t{s.context} * kv_dim), "decode strides"));
    SCD_ASSIGN_OR_RETURN(auto lengths,
                         Upload(std::vector<int32_t>(s.batch, s.context), "decode lengths"));
    const int64_t ws_floats =
        cuda::DecodeAttentionWorkspaceFloats(s.batch, s.context, heads, kv_heads, hd);
    SCD_ASSIGN_OR_RETURN(auto ws, cuda::DeviceBuffer::Allocate(
                                      sizeof(float) * std::max<int64_t>(1, ws_floats), "ws"));
    SCD_ASSIGN_OR_RETURN(auto q,
                         cuda::DeviceBuffer::Allocate(sizeof(float) * s.batch * heads * hd, "q"));
    SCD_ASSIGN_OR_RETURN(auto o,
                         cuda::DeviceBuffer::Allocate(sizeof(float) * s.batch * heads * hd, "o"));
    SCD_RETURN_IF_ERROR(cuda::FillF32(q.as<float>(), int64_t{s.batch} * heads * hd, 0.05f, h));
    cuda::KvCacheTable table;
    table.k = k_table.as<cuda::Bf16* const>();
    table.v = v_table.as<cuda::Bf16* const>();
    table.layer_stride = strides.as<const int64_t>();
    auto time = [&](cuda::DecodeImpl impl) {
      return BestMsPerCall(rig, 2 * layers, [&](int i) {
        return cuda::DecodeAttention(q.as<float>(), heads * hd, table, i % layers,
                                     lengths.as<int32_t>(), s.batch, s.context, heads, kv_heads, hd,
                                     /*window=*/0, impl, o.as<float>(), heads * hd, ws.as<float>(),
                                     ws_floats, h);
      });
    };
    SCD_ASSIGN_OR_RETURN(const float vec, time(cuda::DecodeImpl::kAuto));
    SCD_ASSIGN_OR_RETURN(const float generic, time(cuda::DecodeImpl::kGeneric));
    const double gbps = layer_bytes / (vec * 1e-3) / 1e9;
    const double generic_gbps = layer_bytes / (generic * 1e-3) / 1e9;
    std::printf(
        "  batch %2d context %6d: vectorized %8.1f us %6.0f GB/s (%.3f of copy); generic %8.1f "
        "us %6.0f GB/s (%.3f); vectorized_vs_generic=%.2f\n",
        s.batch, s.context, vec * 1e3, gbps, gbps / copy_gbps, generic * 1e3, generic_gbps,
        generic_gbps / copy_gbps, generic / vec);
    out.push_back({{"batch", s.batch},
                   {"context", s.context},
                   {"us", vec * 1e3},
                   {"gbps", gbps},
                   {"vs_copy", gbps / copy_gbps},
                   {"generic_us", generic * 1e3},
                   {"generic_gbps", generic_gbps},
                   {"generic_vs_copy", generic_gbps / copy_gbps},
                   {"speedup", generic / vec}});
  }
  return out;
}

namespace {

// The zoom-in benchmark's shape (see MeasureSekvZoom).
struct ZoomBenchShape {
  int heads, kv_heads, hd;
  int span = 8, rank = 16, slots, layers = 32;
  int ns;              // spans a KV head
  int64_t spans;       // all KV heads'
  size_t slot_floats;  // K and V: U_rΣ_r, V_rᵀ
  size_t pool_floats;
  cuda::ZoomParams zoom;
};

ZoomBenchShape MakeZoomBenchShape(bool quick, int context) {
  ZoomBenchShape s;
  s.heads = quick ? 4 : 32;
  s.kv_heads = quick ? 2 : 8;
  s.hd = quick ? 64 : 128;
  s.slots = quick ? 16 : 512;
  s.ns = static_cast<int>(context * 0.85) / s.span;
  s.zoom.budget = quick ? 16 : 64;
  s.zoom.candidate_budget = 2 * s.zoom.budget;
  s.zoom.by_token = 1;
  s.spans = int64_t{s.kv_heads} * s.ns;
  s.slot_floats = size_t{2} * (s.span * s.rank + s.rank * s.hd);
  s.pool_floats = s.slot_floats * s.slots * s.kv_heads;
  return s;
}

// The zoom-in's inputs and outputs on the device, but for the bases.
struct ZoomBenchBuffers {
  cuda::DeviceBuffer q, lse, alpha, tau, remaining, base_lc, step_lc, step_skip, stats, out_k,
      out_v, expansion, ws;
  int64_t ws_bytes = 0;
};

absl::StatusOr<ZoomBenchBuffers> MakeZoomBenchBuffers(const ZoomBenchShape& s) {
  ZoomBenchBuffers b;
  std::vector<float> alpha(s.spans);
  for (int64_t i = 0; i < s.spans; ++i) {
    alpha[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
  }
  SCD_ASSIGN_OR_RETURN(b.q,
                       Upload(Normal(static_cast<size_t>(s.heads) * s.hd, 31, 1.0f), "zoom q"));
  SCD_ASSIGN_OR_RETURN(b.lse, Upload(std::vector<float>(s.heads, 8.0f), "zoom lse"));
  SCD_ASSIGN_OR_RETURN(b.alpha, Upload(alpha, "zoom alpha"));
  SCD_ASSIGN_OR_RETURN(b.tau, Upload(std::vector<float>(s.kv_heads, 0.0f), "zoom tau"));
  SCD_ASSIGN_OR_RETURN(b.remaining, Upload(std::vector<int32_t>(s.spans, s.span), "remaining"));
  SCD_ASSIGN_OR_RETURN(
      b.base_lc,
      Upload(std::vector<float>(s.spans, std::log(static_cast<float>(s.span))), "base_lc"));
  SCD_ASSIGN_OR_RETURN(b.step_lc, cuda::DeviceBuffer::Allocate(sizeof(float) * s.spans, "lc"));
  SCD_ASSIGN_OR_RETURN(b.step_skip, cuda::DeviceBuffer::Allocate(s.spans, "skip"));
  SCD_ASSIGN_OR_RETURN(b.stats, Upload(std::vector<int64_t>(4 * s.kv_heads, 0), "stats"));
  const size_t out_bytes = sizeof(cuda::Bf16) * s.kv_heads * s.zoom.budget * s.hd;
  SCD_ASSIGN_OR_RETURN(b.out_k, cuda::DeviceBuffer::Allocate(out_bytes, "zoom out k"));
  SCD_ASSIGN_OR_RETURN(b.out_v, cuda::DeviceBuffer::Allocate(out_bytes, "zoom out v"));
  SCD_ASSIGN_OR_RETURN(b.expansion,
                       Upload(std::vector<cuda::AttentionSegment>(s.kv_heads), "expansion"));
  b.ws_bytes = cuda::SekvZoomWorkspaceBytes(s.kv_heads, s.zoom.candidate_budget);
  SCD_ASSIGN_OR_RETURN(b.ws, cuda::DeviceBuffer::Allocate(b.ws_bytes, "zoom workspace"));
  return b;
}

// The basis table over `pool`: span s of KV head g on slot s % slots of g.
absl::StatusOr<cuda::DeviceBuffer> ZoomBasisTable(const ZoomBenchShape& s, const float* pool) {
  std::vector<cuda::SpanBasisRef> refs(s.spans);
  for (int64_t i = 0; i < s.spans; ++i) {
    const int g = static_cast<int>(i / s.ns), sp = static_cast<int>(i % s.ns);
    const float* at = pool + (static_cast<size_t>(g) * s.slots + sp % s.slots) * s.slot_floats;
    cuda::SpanBasisRef& r = refs[i];
    r.us_k = at;
    r.vt_k = at + s.span * s.rank;
    r.us_v = r.vt_k + s.rank * s.hd;
    r.vt_v = r.us_v + s.span * s.rank;
    r.length = s.span;
    r.rank_k = r.rank_v = s.rank;
  }
  return Upload(refs, "zoom basis table");
}

// The bases one call reads, from the counts every timed call added (each call is the same
// zoom-in): per KV head, every candidate's key basis for the scores (its tokens all scored:
// no pins here), then both bases of every span with a kept row.
absl::StatusOr<double> ZoomBusBytes(const ZoomBenchShape& s, const cuda::DeviceBuffer& stats) {
  std::vector<int64_t> counts(4 * s.kv_heads);
  SCD_RETURN_IF_ERROR(
      cuda::CopyToHostSync(counts.data(), stats.data(), sizeof(int64_t) * counts.size()));
  const double basis_bytes =
      sizeof(float) * (static_cast<double>(s.span) * s.rank + static_cast<double>(s.rank) * s.hd);
  double bus_bytes = 0;
  for (int g = 0; g < s.kv_heads; ++g) {
    const double calls = static_cast<double>(counts[4 * g]);  // one routing round a call
    if (calls <= 0) return absl::InternalError("SekvZoom benchmark: no zoom-in counted");
    const double candidates = static_cast<double>(counts[4 * g + 3]) / s.span / calls;
    const double expanded = static_cast<double>(counts[4 * g + 1]) / calls;
    bus_bytes += (candidates + 2 * expanded) * basis_bytes;
  }
  return bus_bytes;
}

// MeasureSekvZoom's figures, printed and as its JSON.
nlohmann::json ZoomBenchJson(const ZoomBenchShape& s, int context, float device_ms, float pinned_ms,
                             double bus_bytes, double copy_gbps) {
  const double zoom_gbps = bus_bytes / (pinned_ms * 1e-3) / 1e9;
  std::printf(
      "  %d spans a KV head, %d KV heads, %d of %d candidate rows kept: bases on the device "
      "%8.1f us a layer (%.2f ms for %d layers); pinned %8.1f us (%.2f ms); "
      "zoom_pinned_vs_device=%.2f\n"
      "  bases read over the bus: %.0f KB a layer, %.2f GB/s; pinned copy to the device "
      "%.2f GB/s; zoom_bus_vs_copy=%.3f\n",
      s.ns, s.kv_heads, s.zoom.budget, s.zoom.candidate_budget, device_ms * 1e3,
      device_ms * s.layers, s.layers, pinned_ms * 1e3, pinned_ms * s.layers, pinned_ms / device_ms,
      bus_bytes / 1e3, zoom_gbps, copy_gbps, zoom_gbps / copy_gbps);
  return nlohmann::json{{"context", context},
                        {"spans_per_kv_head", s.ns},
                        {"kv_heads", s.kv_heads},
                        {"budget", s.zoom.budget},
                        {"candidate_budget", s.zoom.candidate_budget},
                        {"device_us", device_ms * 1e3},
                        {"pinned_us", pinned_ms * 1e3},
                        {"layers", s.layers},
                        {"pinned_vs_device", pinned_ms / device_ms},
                        {"bus_bytes", bus_bytes},
                        {"bus_gbps", zoom_gbps},
                        {"pinned_copy_gbps", copy_gbps},
                        {"bus_vs_copy", zoom_gbps / copy_gbps}};
}

}  // namespace

// The zoom-in of one layer alone (SekvZoom, one block per KV head), on the shape the SEKV
// benchmarks use at 32K positions (sekv_step_bench.cc: spans of 8 after 15% anchors, bases of
// rank 16, 64 rows kept of 16 candidate spans a KV head), with the CPU tier's bases in device
// memory and in pinned host memory (read over the bus, as the daemon reads its registered
// tier). 512 basis slots a KV head, span s on slot s % 512, so that the table has the tier's
// size without its memory.
absl::StatusOr<nlohmann::json> MeasureSekvZoom(bool quick, int context) {
  std::printf("[sekv zoom] SekvZoom alone at %d positions, bases on the device and pinned\n",
              context);
  SCD_ASSIGN_OR_RETURN(const Rig rig, MakeRig(/*with_gemm=*/false));
  const cuda::StreamHandle h = rig.handle();
  const ZoomBenchShape s = MakeZoomBenchShape(quick, context);
  SCD_ASSIGN_OR_RETURN(const ZoomBenchBuffers b, MakeZoomBenchBuffers(s));

  const std::vector<float> pool_host = Normal(s.pool_floats, 32, 0.25f);
  SCD_ASSIGN_OR_RETURN(auto pool_dev, Upload(pool_host, "zoom bases"));
  cuda::PinnedBuffer pool_pinned;
  SCD_RETURN_IF_ERROR(pool_pinned.Reserve(sizeof(float) * s.pool_floats));
  std::copy(pool_host.begin(), pool_host.end(), pool_pinned.as<float>());
  SCD_ASSIGN_OR_RETURN(auto table_dev, ZoomBasisTable(s, pool_dev.as<float>()));
  SCD_ASSIGN_OR_RETURN(auto table_pinned, ZoomBasisTable(s, pool_pinned.as<float>()));
  auto time = [&](const cuda::DeviceBuffer& refs) {
    return BestMsPerCall(rig, quick ? 2 : s.layers, [&](int) {
      return cuda::SekvZoom(
          b.q.as<float>(), b.lse.as<float>(), b.alpha.as<float>(), b.tau.as<float>(),
          b.remaining.as<int32_t>(), b.base_lc.as<float>(), refs.as<cuda::SpanBasisRef>(),
          /*pinned=*/nullptr, s.ns, s.heads, s.kv_heads, s.hd, s.zoom, b.out_k.data(),
          b.out_v.data(), cuda::KvType::kBf16, b.expansion.as<cuda::AttentionSegment>(),
          /*expansion_stride=*/1, b.step_lc.as<float>(), b.step_skip.as<uint8_t>(),
          b.stats.as<int64_t>(), b.ws.data(), b.ws_bytes, h);
    });
  };
  SCD_ASSIGN_OR_RETURN(const float device_ms, time(table_dev));
  SCD_ASSIGN_OR_RETURN(const float pinned_ms, time(table_pinned));
  SCD_ASSIGN_OR_RETURN(const double bus_bytes, ZoomBusBytes(s, b.stats));
  // The bus's own rate in the same run: the whole pinned pool copied to the device.
  const size_t pool_bytes = sizeof(float) * s.pool_floats;
  SCD_ASSIGN_OR_RETURN(const float copy_ms, BestMsPerCall(rig, quick ? 1 : 4, [&](int) {
                         return cuda::CopyToDevice(pool_dev.data(), pool_pinned.data(), pool_bytes,
                                                   h);
                       }));
  const double copy_gbps = static_cast<double>(pool_bytes) / (copy_ms * 1e-3) / 1e9;
  return ZoomBenchJson(s, context, device_ms, pinned_ms, bus_bytes, copy_gbps);
}

std::string KernelMarkdown(const nlohmann::json& r) {
  std::ostringstream md;
  if (r.contains("small_batch")) {
    md << "Decode-sized projections: the backend's Linear (LinearSmallBatch up to "
       << cuda::kSmallBatchMaxRows
       << " rows) against cuBLAS on the same operands, weight bytes streamed per second.\n\n"
       << "| weights | n | k | m | us | GB/s | vs copy | cuBLAS us | cuBLAS vs copy | speed-up |\n"
       << "|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& x : r["small_batch"]) {
      md << absl::StrFormat("| %s | %d | %d | %d | %.1f | %.0f | %.2f | %.1f | %.2f | %.2fx |\n",
                            x["shape"].get<std::string>(), x["n"].get<int>(), x["k"].get<int>(),
                            x["m"].get<int>(), x["us"].get<double>(), x["gbps"].get<double>(),
                            x["vs_copy"].get<double>(), x["cublas_us"].get<double>(),
                            x["cublas_vs_copy"].get<double>(), x["speedup"].get<double>());
    }
    md << "\n";
  }
  if (r.contains("prefill_attention")) {
    md << "Prefill attention alone (causal, 32 query / 8 KV heads of 128; TFLOP/s of the causal "
          "half): kAuto's WMMA kernel and the mma.sync kernel (kTensorCoreMma).\n\n"
       << "| tokens | WMMA ms | WMMA TFLOP/s | vs GEMM peak | mma.sync ms | mma.sync TFLOP/s | "
          "vs GEMM peak | mma.sync speed-up |\n|---|---|---|---|---|---|---|---|\n";
    for (const auto& x : r["prefill_attention"]) {
      md << absl::StrFormat("| %d | %.3f | %.1f | %.3f | %.3f | %.1f | %.3f | %.2fx |\n",
                            x["tokens"].get<int>(), x["wmma_ms"].get<double>(),
                            x["wmma_tflops"].get<double>(), x["wmma_vs_gemm_peak"].get<double>(),
                            x["mma_ms"].get<double>(), x["mma_tflops"].get<double>(),
                            x["mma_vs_gemm_peak"].get<double>(), x["mma_speedup"].get<double>());
    }
    md << "\n";
  }
  if (r.contains("sekv_zoom")) {
    const auto& x = r["sekv_zoom"];
    md << absl::StrFormat(
        "SEKV zoom-in alone (`SekvZoom`, one layer, %d spans a KV head, %d KV heads, %d of %d "
        "candidate rows kept): %.1f us with the bases on the device, %.1f us pinned on the host "
        "(%.2fx); %d layers: %.2f / %.2f ms a step. Pinned, it reads %.0f KB of bases a layer "
        "over the bus at %.2f GB/s, %.3f of a pinned copy's %.2f GB/s in the same run.\n\n",
        x["spans_per_kv_head"].get<int>(), x["kv_heads"].get<int>(), x["budget"].get<int>(),
        x["candidate_budget"].get<int>(), x["device_us"].get<double>(),
        x["pinned_us"].get<double>(), x["pinned_vs_device"].get<double>(), x["layers"].get<int>(),
        x["device_us"].get<double>() * x["layers"].get<int>() / 1e3,
        x["pinned_us"].get<double>() * x["layers"].get<int>() / 1e3,
        x["bus_bytes"].get<double>() / 1e3, x["bus_gbps"].get<double>(),
        x["bus_vs_copy"].get<double>(), x["pinned_copy_gbps"].get<double>());
  }
  if (r.contains("decode_attention")) {
    md << "Decode attention alone (one query per sequence, 32 query / 8 KV heads of 128; GB/s "
          "of K and V read): the vectorized split kernel (kAuto) and the generic one.\n\n"
       << "| batch | context | vectorized us | GB/s | vs copy | generic us | generic vs copy | "
          "vectorized speed-up |\n|---|---|---|---|---|---|---|---|\n";
    for (const auto& x : r["decode_attention"]) {
      md << absl::StrFormat("| %d | %d | %.1f | %.0f | %.3f | %.1f | %.3f | %.2fx |\n",
                            x["batch"].get<int>(), x["context"].get<int>(), x["us"].get<double>(),
                            x["gbps"].get<double>(), x["vs_copy"].get<double>(),
                            x["generic_us"].get<double>(), x["generic_vs_copy"].get<double>(),
                            x["speedup"].get<double>());
    }
    md << "\n";
  }
  return md.str();
}

}  // namespace scd::cuda_bench
