// CPU stand-ins of the SEKV launchers (kernels/cuda/scd_sekv_ops.h) that sekv::GpuSekv uses,
// written from their contracts; the "device" is standin_memory.cc's (host memory, registered,
// poisoned when fresh or freed). Linked into test_gpu_host (GpuSekv's host orchestration:
// segment tables, summary-count edits, pins, window growth, workspace sizing, the order of
// SekvCache's external protocol) and test_cuda_host (the same through the real CudaBackend).
// Each refuses what its launcher refuses, through the same checks (launch_checks.h: shapes,
// segment counts, route_dim, zoom budgets, workspace sizes), and checks the kernels'
// preconditions: that SekvAttention's max_rows covers every row (the device kernel would
// leave rows beyond its split uncounted).
// SpanRebuildRows is here for scd-gpu-bench-host (the SEKV step benchmark). SekvZoom mirrors
// its twins (SelectSpans, ScoreSpanTokens, KeepHeaviest, LowRankBasis::ReconstructRow, the
// summary edits of SekvSummaryStep) on raw pointers, and checks that every basis it is given
// is device or pinned memory unless DeviceReadsPageableMemory() (a GPU without HMM/ATS faults
// on a std::vector's pages). Each queues its work on its stream (standin::Enqueue), as
// standin_ops.cc does. The kernels themselves are checked by test_cuda.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "kernels/cuda/split_plan.h"
#include "tests/gpu/standin/standin_memory.h"

namespace scd::cuda {
using standin::Require;
using standin::RequireDevice;

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
// Requires `count` floats at p that the device can read: device memory, pinned host memory,
// or any host memory when the device reads pageable memory (`pageable`).
void RequireReadable(const float* p, int64_t count, bool pageable, const char* what) {
  if (count <= 0) return;
  Require(p != nullptr, what);
  if (standin::IsDevice(p)) {
    RequireDevice(p, count, what);
    return;
  }
  Require(pageable || standin::IsPinned(p, static_cast<size_t>(count) * sizeof(float)), what);
}
}  // namespace

int64_t SekvAttentionWorkspaceFloats(int num_heads, int head_dim, int max_rows) {
  if (num_heads <= 0) return 0;
  return static_cast<int64_t>(num_heads) * SekvSplits(max_rows) * (head_dim + 2);
}

absl::Status SekvAttention(const float* q, const AttentionSegment* segs, int nseg, int H, int G,
                           int hd, int max_rows, DecodeImpl impl, float* out, float* lse, float* ws,
                           int64_t ws_floats, StreamHandle stream) {
  if (H <= 0 || (out == nullptr && lse == nullptr)) return absl::OkStatus();
  if (absl::Status s = launch_checks::SekvShape("SekvAttention", H, G, hd); !s.ok()) return s;
  if (absl::Status s = launch_checks::SekvSegments(nseg, max_rows); !s.ok()) return s;
  if (absl::Status s = launch_checks::TakesVectorized("SekvAttention", H, G, hd, impl).status();
      !s.ok()) {
    return s;
  }
  const int64_t need = SekvAttentionWorkspaceFloats(H, hd, max_rows);
  if (absl::Status s = launch_checks::Workspace("SekvAttention", ws_floats, need, "floats");
      !s.ok()) {
    return s;
  }
  standin::Enqueue(stream, [=] {
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
  if (absl::Status s = launch_checks::SekvShape("SekvRouteGate", H, G, hd); !s.ok()) return s;
  if (absl::Status s = launch_checks::RouteDim(r); !s.ok()) return s;
  standin::Enqueue(stream, [=] {
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
  if (H <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::PositiveHeadDim("MergeAttention", hd); !s.ok()) return s;
  for (const float* p : {oa, ob, static_cast<const float*>(out)}) {
    RequireDevice(p, int64_t{H} * hd, "MergeAttention outputs");
  }
  standin::Enqueue(stream, [=] {
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
  standin::Enqueue(stream, [=] {
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
  if (absl::Status s = launch_checks::PositiveHeadDim("SpanRebuildRows", head_dim); !s.ok()) {
    return s;
  }
  standin::Enqueue(stream, [=] {
    RequireDevice(jobs, count, "SpanRebuildRows jobs");
    for (int j = 0; j < count; ++j) {
      const RebuildJob& job = jobs[j];
      Require(job.rank > 0 && job.us_row != nullptr && job.vt != nullptr, "a job has a basis");
      if (standin::IsDevice(job.us_row)) RequireDevice(job.us_row, job.rank, "SpanRebuildRows U");
      if (standin::IsDevice(job.vt)) {
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

namespace {

// SekvZoom's arguments as one KV head's pass reads them.
struct ZoomArgs {
  const float* q;
  const float* lse;
  const float* alpha;
  const float* tau;
  const int32_t* remaining;
  const float* base_lc;
  const SpanBasisRef* bases;
  const uint8_t* pinned;
  int ns, H, G, hd;
  ZoomParams p;
  void* out_k;
  void* out_v;
  KvType out_type;
  AttentionSegment* expansion;
  int expansion_stride;
  float* step_lc;
  uint8_t* step_skip;
  int64_t* stats;
  const void* workspace;
  int64_t need;  // SekvZoomWorkspaceBytes
  bool pageable;
};

// A candidate's token as the zoom-in weighs it.
struct ZoomToken {
  float weight;
  int cand, span, offset;
};

// What the kernel reads and writes must be device memory; the bases device or pinned memory
// (pageable host memory only where the device reads it), with ranks the kernel holds. Every
// entry of the basis table is checked, read or not this time.
void RequireZoomMemory(const ZoomArgs& a) {
  const int64_t total = int64_t{a.G} * a.ns;
  RequireDevice(static_cast<const int32_t*>(a.workspace), a.need / 4, "SekvZoom workspace");
  RequireDevice(a.q, int64_t{a.H} * a.hd, "SekvZoom q");
  RequireDevice(a.lse, a.H, "SekvZoom lse");
  RequireDevice(a.tau, a.G, "SekvZoom tau");
  for (const float* x : {a.alpha, a.base_lc, static_cast<const float*>(a.step_lc)}) {
    RequireDevice(x, total, "SekvZoom per-span arrays (alpha, base_lc, step_lc)");
  }
  RequireDevice(a.remaining, total, "SekvZoom remaining");
  RequireDevice(a.step_skip, total, "SekvZoom step_skip");
  RequireDevice(a.bases, total, "SekvZoom basis table");
  RequireDevice(a.stats, int64_t{a.G} * 4, "SekvZoom stats");
  RequireRows(a.out_k, a.out_type, int64_t{a.G} * a.p.budget * a.hd, "SekvZoom out_k");
  RequireRows(a.out_v, a.out_type, int64_t{a.G} * a.p.budget * a.hd, "SekvZoom out_v");
  for (int g = 0; g < a.G; ++g) {
    RequireDevice(a.expansion + int64_t{g} * a.expansion_stride, 1, "SekvZoom expansion segment");
  }
  for (int64_t i = 0; i < total; ++i) {
    const SpanBasisRef& b = a.bases[i];
    Require(b.length >= 0 && b.rank_k >= 0 && b.rank_k <= kMaxBasisRank && b.rank_v >= 0 &&
                b.rank_v <= kMaxBasisRank,
            "SekvZoom basis length and ranks (at most kMaxBasisRank)");
    const char* what =
        "SekvZoom basis: device or pinned memory (pageable host memory only where the "
        "device reads it)";
    RequireReadable(b.us_k, int64_t{b.length} * b.rank_k, a.pageable, what);
    RequireReadable(b.vt_k, int64_t{b.rank_k} * a.hd, a.pageable, what);
    RequireReadable(b.us_v, int64_t{b.length} * b.rank_v, a.pageable, what);
    RequireReadable(b.vt_v, int64_t{b.rank_v} * a.hd, a.pageable, what);
    if (a.pinned != nullptr && b.pinned >= 0) {
      RequireDevice(a.pinned + b.pinned, b.length, "SekvZoom pinned flags");
    }
  }
}

// 1. SelectSpans for KV head g: descending alpha (ties: lower span), each taken while it fits;
// the walk ends once the budget left is below the shortest eligible span.
std::vector<int> ZoomCandidates(const ZoomArgs& a, int g) {
  const int64_t row0 = int64_t{g} * a.ns;
  const float* al = a.alpha + row0;
  const int32_t* rem = a.remaining + row0;
  const float t = a.tau[g];
  std::vector<int> order;
  int shortest = 0;
  for (int s = 0; s < a.ns; ++s) {
    if (!(al[s] > t) || rem[s] <= 0) continue;
    shortest = order.empty() ? rem[s] : std::min(shortest, int(rem[s]));
    order.push_back(s);
  }
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return al[x] > al[y]; });
  std::vector<int> cand;
  int used = 0;
  for (int s : order) {
    if (a.p.candidate_budget - used < shortest) break;
    if (used + rem[s] > a.p.candidate_budget) continue;
    used += rem[s];
    cand.push_back(s);
  }
  return cand;
}

// 2. The candidates' tokens not pinned; by token, weighted as ScoreSpanTokens does.
std::vector<ZoomToken> ZoomCandidateTokens(const ZoomArgs& a, int g, const std::vector<int>& cand) {
  const int64_t row0 = int64_t{g} * a.ns;
  const int group = a.H / a.G, hd = a.hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<ZoomToken> tokens;
  std::vector<float> y;
  for (int c = 0; c < static_cast<int>(cand.size()); ++c) {
    const SpanBasisRef& b = a.bases[row0 + cand[c]];
    const int r = b.rank_k;
    if (a.p.by_token) {
      y.assign(static_cast<size_t>(group) * std::max(r, 1), 0.0f);
      for (int h = 0; h < group; ++h) {
        const float* qh = a.q + int64_t{g * group + h} * hd;
        for (int j = 0; j < r; ++j) {
          float z = 0;
          for (int d = 0; d < hd; ++d) z += b.vt_k[int64_t{j} * hd + d] * qh[d];
          y[h * r + j] = z;
        }
      }
    }
    for (int i = 0; i < b.length; ++i) {
      if (a.pinned != nullptr && b.pinned >= 0 && a.pinned[b.pinned + i]) continue;
      double w = 0;
      if (a.p.by_token) {
        const float* u = b.us_k + int64_t{i} * r;
        for (int h = 0; h < group; ++h) {
          float dot = 0;
          for (int j = 0; j < r; ++j) dot += u[j] * y[h * r + j];
          w += std::exp(static_cast<double>(dot * scale - a.lse[g * group + h]));
        }
      }
      tokens.push_back({static_cast<float>(w), c, cand[c], i});
    }
  }
  return tokens;
}

// 4. The first `kept` tokens' rows for KV head g (ReconstructRow's order of summation),
// heaviest first; *kept_per: the rows kept of each candidate.
void WriteZoomRows(const ZoomArgs& a, int g, const std::vector<ZoomToken>& tokens, int kept,
                   std::vector<int>* kept_per) {
  const int64_t row0 = int64_t{g} * a.ns;
  const int hd = a.hd;
  std::vector<float> k_row(hd), v_row(hd);
  for (int i = 0; i < kept; ++i) {
    const ZoomToken& tk = tokens[i];
    const SpanBasisRef& b = a.bases[row0 + tk.span];
    ++(*kept_per)[tk.cand];
    for (int d = 0; d < hd; ++d) {
      float ka = 0, va = 0;
      for (int j = 0; j < b.rank_k; ++j) {
        ka += b.us_k[int64_t{tk.offset} * b.rank_k + j] * b.vt_k[int64_t{j} * hd + d];
      }
      for (int j = 0; j < b.rank_v; ++j) {
        va += b.us_v[int64_t{tk.offset} * b.rank_v + j] * b.vt_v[int64_t{j} * hd + d];
      }
      k_row[d] = ka;
      v_row[d] = va;
    }
    const int64_t at = (int64_t{g} * a.p.budget + i) * hd;
    for (int d = 0; d < hd; ++d) {
      if (a.out_type == KvType::kBf16) {
        static_cast<Bf16*>(a.out_k)[at + d] = FloatToBf16(k_row[d]);
        static_cast<Bf16*>(a.out_v)[at + d] = FloatToBf16(v_row[d]);
      } else {
        static_cast<float*>(a.out_k)[at + d] = k_row[d];
        static_cast<float*>(a.out_v)[at + d] = v_row[d];
      }
    }
  }
}

// 5. KV head g's summary counts of the step: SekvSummaryStep with (span, tokens kept) as the
// edits; and its expansion rows and stats.
void ZoomSummaryStep(const ZoomArgs& a, int g, const std::vector<int>& cand,
                     const std::vector<int>& kept_per, int kept, int scored) {
  const int64_t row0 = int64_t{g} * a.ns;
  const int32_t* rem = a.remaining + row0;
  for (int s = 0; s < a.ns; ++s) {
    a.step_lc[row0 + s] = a.base_lc[row0 + s];
    a.step_skip[row0 + s] = rem[s] <= 0;
  }
  int spans = 0;
  for (size_t c = 0; c < cand.size(); ++c) {
    if (kept_per[c] == 0) continue;
    ++spans;
    const int left = rem[cand[c]] - kept_per[c];
    a.step_skip[row0 + cand[c]] = left <= 0;
    if (left > 0) a.step_lc[row0 + cand[c]] = std::log(float(left));
  }
  a.expansion[int64_t{g} * a.expansion_stride].rows = kept;
  int64_t* st = a.stats + int64_t{g} * 4;
  st[0] += 1;
  st[1] += spans;
  st[2] += kept;
  st[3] += scored;
}

// One KV head's pass, as one block of the kernel.
void ZoomKvHead(const ZoomArgs& a, int g) {
  const std::vector<int> cand = ZoomCandidates(a, g);
  std::vector<ZoomToken> tokens = ZoomCandidateTokens(a, g, cand);
  Require(tokens.size() <= static_cast<size_t>(SekvZoomPad(a.p.candidate_budget)),
          "SekvZoom: the candidates' unpinned tokens fit the workspace (remaining counts "
          "them)");
  const int scored = a.p.by_token ? static_cast<int>(tokens.size()) : 0;
  // 3. KeepHeaviest (ties: lower span, then offset); by span the walk's order as listed.
  if (a.p.by_token) {
    std::sort(tokens.begin(), tokens.end(), [](const ZoomToken& x, const ZoomToken& y) {
      if (x.weight != y.weight) return x.weight > y.weight;
      if (x.span != y.span) return x.span < y.span;
      return x.offset < y.offset;
    });
  }
  const int kept = std::min(static_cast<int>(tokens.size()), a.p.budget);
  std::vector<int> kept_per(cand.size(), 0);
  WriteZoomRows(a, g, tokens, kept, &kept_per);
  ZoomSummaryStep(a, g, cand, kept_per, kept, scored);
}

}  // namespace

// One block of the kernel per KV head, here one pass per KV head in the twins' order.
absl::Status SekvZoom(const float* q, const float* lse, const float* alpha, const float* tau,
                      const int32_t* remaining, const float* base_lc, const SpanBasisRef* bases,
                      const uint8_t* pinned, int ns, int H, int G, int hd, ZoomParams p,
                      void* out_k, void* out_v, KvType out_type, AttentionSegment* expansion,
                      int expansion_stride, float* step_lc, uint8_t* step_skip, int64_t* stats,
                      void* workspace, int64_t workspace_bytes, StreamHandle stream) {
  if (H <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::SekvShape("SekvZoom", H, G, hd); !s.ok()) return s;
  if (absl::Status s = launch_checks::Zoom(ns, p, G, workspace, workspace_bytes); !s.ok()) {
    return s;
  }
  const ZoomArgs args{q,
                      lse,
                      alpha,
                      tau,
                      remaining,
                      base_lc,
                      bases,
                      pinned,
                      ns,
                      H,
                      G,
                      hd,
                      p,
                      out_k,
                      out_v,
                      out_type,
                      expansion,
                      expansion_stride,
                      step_lc,
                      step_skip,
                      stats,
                      workspace,
                      SekvZoomWorkspaceBytes(G, p.candidate_budget),
                      DeviceReadsPageableMemory()};
  standin::Enqueue(stream, [args] {
    RequireZoomMemory(args);
    for (int g = 0; g < args.G; ++g) ZoomKvHead(args, g);
  });
  return absl::OkStatus();
}

}  // namespace scd::cuda
