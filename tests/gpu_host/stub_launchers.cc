// CPU stand-ins of the SEKV launchers (kernels/cuda/scd_sekv_ops.h) that sekv::GpuSekv uses,
// written from their contracts; the "device" is stub_memory.cc's (host memory, registered,
// poisoned when fresh or freed). Linked into test_gpu_host (GpuSekv's host orchestration:
// segment tables, summary-count edits, pins, window growth, workspace sizing, the order of
// SekvCache's external protocol) and test_cuda_host (the same through the real CudaBackend).
// They check the kernels' preconditions: SekvAttention's workspace size, and that its
// max_rows covers every row (the device kernel would leave rows beyond its split uncounted).
// SpanRebuildRows is here for scd-gpu-bench-host (the SEKV step benchmark). Each queues its
// work on its stream (stub::Enqueue), as stub_ops.cc does. The kernels themselves are checked
// by test_cuda.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "kernels/cuda/split_plan.h"
#include "tests/gpu_host/stub_memory.h"

namespace scd::cuda {
using stub::Require;
using stub::RequireDevice;

namespace {
using split_plan::SekvChunk;
using split_plan::SekvSplits;
// `n` elements of an F32 or BF16 array from element `at`, widened to F32.
std::vector<float> Widened(const void* p, KvType type, int64_t at, int n) {
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) {
    out[i] = type == KvType::kF32 ? static_cast<const float*>(p)[at + i]
                                  : Bf16ToFloat(static_cast<const Bf16*>(p)[at + i]);
  }
  return out;
}
// Requires `count` elements of `type` at p in device memory.
void RequireRows(const void* p, KvType type, int64_t count, const char* what) {
  if (type == KvType::kF32) {
    RequireDevice(static_cast<const float*>(p), count, what);
  } else {
    RequireDevice(static_cast<const Bf16*>(p), count, what);
  }
}
}  // namespace

int64_t SekvAttentionWorkspaceFloats(int num_heads, int head_dim, int max_rows) {
  if (num_heads <= 0) return 0;
  return static_cast<int64_t>(num_heads) * SekvSplits(max_rows) * (head_dim + 2);
}

absl::Status SekvAttention(const float* q, const AttentionSegment* segs, int nseg, int H, int G,
                           int hd, int max_rows, float* out, float* lse, float* ws,
                           int64_t ws_floats, StreamHandle stream) {
  if (H <= 0 || (out == nullptr && lse == nullptr)) return absl::OkStatus();
  if (nseg <= 0 || nseg > 16) return absl::InvalidArgumentError("segments");
  const int64_t need = SekvAttentionWorkspaceFloats(H, hd, max_rows);
  if (ws_floats < need) {
    std::fprintf(stderr, "workspace %ld < %ld\n", (long)ws_floats, (long)need);
    return absl::InvalidArgumentError("workspace");
  }
  stub::Enqueue(stream, [=] {
    RequireDevice(ws, need, "SekvAttention workspace");
    RequireDevice(q, int64_t{H} * hd, "SekvAttention q");
    RequireDevice(segs, int64_t{G} * nseg, "SekvAttention segment table");
    if (out) RequireDevice(out, int64_t{H} * hd, "SekvAttention out");
    if (lse) RequireDevice(lse, H, "SekvAttention lse");
    for (int i = 0; i < G * nseg; ++i) {
      const AttentionSegment& sg = segs[i];
      if (sg.rows <= 0) continue;
      const int64_t extent = int64_t{sg.rows - 1} * sg.stride + hd;
      RequireRows(sg.k, sg.type, extent, "SekvAttention segment K rows");
      if (out) RequireRows(sg.v, sg.type, extent, "SekvAttention segment V rows");
      if (sg.log_count) RequireDevice(sg.log_count, sg.rows, "SekvAttention segment log counts");
      if (sg.skip) RequireDevice(sg.skip, sg.rows, "SekvAttention segment skips");
    }
    const int group = H / G;
    const float scale = 1.0f / std::sqrt(float(hd));
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      int total = 0;
      for (int i = 0; i < nseg; ++i) total += std::max(segs[g * nseg + i].rows, 0);
      // The kernel covers only splits * chunk rows.
      Require(total <= SekvSplits(max_rows) * SekvChunk(max_rows), "rows beyond max_rows' splits");
      std::vector<float> s;
      std::vector<std::vector<float>> vrow;
      for (int i = 0; i < nseg; ++i) {
        const AttentionSegment& sg = segs[g * nseg + i];
        for (int r = 0; r < sg.rows; ++r) {
          if (sg.skip && sg.skip[r]) continue;
          const std::vector<float> k = Widened(sg.k, sg.type, int64_t{r} * sg.stride, hd);
          float dot = 0;
          for (int d = 0; d < hd; ++d) dot += q[h * hd + d] * k[d];
          s.push_back(dot * scale + (sg.log_count ? sg.log_count[r] : 0.0f));
          if (out) vrow.push_back(Widened(sg.v, sg.type, int64_t{r} * sg.stride, hd));
        }
      }
      float m = -INFINITY;
      for (float x : s) m = std::max(m, x);
      double sum = 0;
      std::vector<double> acc(hd, 0.0);
      for (size_t i = 0; i < s.size(); ++i) {
        const double p = std::exp(double(s[i]) - m);
        sum += p;
        if (out)
          for (int d = 0; d < hd; ++d) acc[d] += p * vrow[i][d];
      }
      if (lse) lse[h] = sum > 0 ? float(m + std::log(sum)) : -1e30f;
      if (out)
        for (int d = 0; d < hd; ++d) out[h * hd + d] = sum > 0 ? float(acc[d] / sum) : 0.0f;
    }
  });
  return absl::OkStatus();
}

absl::Status SekvRouteGate(const float* q, const float* p_q, const float* p_k, int r,
                           const void* summary_k, KvType type, int64_t stride,
                           const float* log_count, const int32_t* remaining,
                           const RouterGateParams* gates, const float* lse, int ns, int H, int G,
                           int hd, float* alpha, StreamHandle stream) {
  if (ns <= 0 || H <= 0) return absl::OkStatus();
  stub::Enqueue(stream, [=] {
    RequireDevice(q, int64_t{H} * hd, "SekvRouteGate q");
    RequireDevice(p_q, int64_t{G} * r * hd, "SekvRouteGate P_q");
    RequireDevice(p_k, int64_t{G} * r * hd, "SekvRouteGate P_k");
    RequireRows(summary_k, type, (ns - 1) * stride + int64_t{G} * hd, "SekvRouteGate summary K");
    for (const float* p : {log_count, static_cast<const float*>(alpha)}) {
      RequireDevice(p, int64_t{G} * ns, "SekvRouteGate per-span arrays");
    }
    RequireDevice(remaining, int64_t{G} * ns, "SekvRouteGate remaining");
    RequireDevice(gates, G, "SekvRouteGate gates");
    RequireDevice(lse, H, "SekvRouteGate lse");
    const int group = H / G;
    const float scale = 1.0f / std::sqrt(float(hd));
    for (int g = 0; g < G; ++g) {
      std::vector<float> qr(group * hd, 0.0f);
      for (int i = 0; i < group; ++i) {
        const float* qh = q + (g * group + i) * hd;
        std::vector<float> z(r, 0.0f);
        for (int a = 0; a < r; ++a)
          for (int c = 0; c < hd; ++c) z[a] += p_q[((int64_t)g * r + a) * hd + c] * qh[c];
        for (int c = 0; c < hd; ++c)
          for (int a = 0; a < r; ++a) qr[i * hd + c] += z[a] * p_k[((int64_t)g * r + a) * hd + c];
      }
      for (int s = 0; s < ns; ++s) {
        const int64_t gs = (int64_t)g * ns + s;
        if (remaining[gs] == 0) {
          alpha[gs] = 0;
          continue;
        }
        const std::vector<float> kb = Widened(summary_k, type, s * stride + g * hd, hd);
        float best = 0;
        for (int i = 0; i < group; ++i) {
          float bil = 0, dot = 0;
          for (int c = 0; c < hd; ++c) {
            bil += qr[i * hd + c] * kb[c];
            dot += q[(g * group + i) * hd + c] * kb[c];
          }
          const float lc = log_count[gs];
          const float z = bil + gates[g].w_size * lc +
                          gates[g].w_share * (dot * scale + lc - lse[g * group + i]) +
                          gates[g].bias;
          best = std::max(best, 1.0f / (1.0f + std::exp(-z)));
        }
        alpha[gs] = best;
      }
    }
  });
  return absl::OkStatus();
}

absl::Status MergeAttention(const float* oa, const float* la, const float* ob, const float* lb,
                            int H, int hd, float* out, StreamHandle stream) {
  for (const float* p : {oa, ob, static_cast<const float*>(out)}) {
    RequireDevice(p, int64_t{H} * hd, "MergeAttention outputs");
  }
  stub::Enqueue(stream, [=] {
    RequireDevice(la, H, "MergeAttention lse");
    RequireDevice(lb, H, "MergeAttention lse");
    for (int h = 0; h < H; ++h) {
      const float m = std::max(la[h], lb[h]);
      const bool empty = m <= -0.5e30f;
      const float wa = empty ? 0 : std::exp(la[h] - m), wb = empty ? 0 : std::exp(lb[h] - m);
      const float inv = empty ? 0 : 1.0f / (wa + wb);
      for (int d = 0; d < hd; ++d)
        out[h * hd + d] = (wa * oa[h * hd + d] + wb * ob[h * hd + d]) * inv;
    }
  });
  return absl::OkStatus();
}

absl::Status SekvSummaryStep(const float* base_lc, const int32_t* remaining, const int32_t* edits,
                             int n, int total, float* step_lc, uint8_t* step_skip,
                             StreamHandle stream) {
  if (total <= 0) return absl::OkStatus();
  stub::Enqueue(stream, [=] {
    RequireDevice(base_lc, total, "SekvSummaryStep base counts");
    RequireDevice(remaining, total, "SekvSummaryStep remaining");
    RequireDevice(step_lc, total, "SekvSummaryStep step counts");
    RequireDevice(step_skip, total, "SekvSummaryStep step skips");
    RequireDevice(edits, 2 * int64_t{n}, "SekvSummaryStep edits");
    for (int i = 0; i < total; ++i) {
      step_lc[i] = base_lc[i];
      step_skip[i] = remaining[i] <= 0;
    }
    for (int j = 0; j < n; ++j) {
      const int i = edits[2 * j];
      Require(i >= 0 && i < total && edits[2 * j + 1] > 0, "an edit names a span and a count > 0");
      const int left = remaining[i] - edits[2 * j + 1];
      step_skip[i] = left <= 0;
      if (left > 0) step_lc[i] = std::log(float(left));
    }
  });
  return absl::OkStatus();
}

// The jobs array is device memory; a job's basis (us_row, vt) may be device memory or pinned
// host memory (unified addressing), so only the device side of it is checked.
absl::Status SpanRebuildRows(const RebuildJob* jobs, int count, int head_dim, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  if (head_dim <= 0) return absl::InvalidArgumentError("SpanRebuildRows: head_dim must be > 0");
  stub::Enqueue(stream, [=] {
    RequireDevice(jobs, count, "SpanRebuildRows jobs");
    for (int j = 0; j < count; ++j) {
      const RebuildJob& job = jobs[j];
      Require(job.rank > 0 && job.us_row != nullptr && job.vt != nullptr, "a job has a basis");
      if (stub::IsDevice(job.us_row)) RequireDevice(job.us_row, job.rank, "SpanRebuildRows U");
      if (stub::IsDevice(job.vt)) {
        RequireDevice(job.vt, int64_t{job.rank} * head_dim, "SpanRebuildRows V");
      }
      RequireDevice(job.out, head_dim, "SpanRebuildRows output row");
      for (int d = 0; d < head_dim; ++d) {
        float acc = 0.0f;
        for (int a = 0; a < job.rank; ++a) acc += job.us_row[a] * job.vt[int64_t{a} * head_dim + d];
        job.out[d] = acc;
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace scd::cuda
