// CUDA kernels of SCD's consumer side and of the SEKV decode step, one host-callable
// launcher per CPU twin, with the conventions of ops.h: CUDA-free header, device memory as
// plain pointers, row-major layouts, F32 arithmetic, launchers return the launch status and
// never synchronise. tests/gpu/parity/scd_codec_test.cc, sekv_kernels_test.cc and sekv_zoom_test.cc
// compare each launcher with its twin.
//
//   SCD REUSE   ReuseDecodeStoreKv  codes → k = z_k D_k + μ_k, v = z_v D_v + μ_v, RoPE on k,
//                                   BF16 store into the KV cache, in one kernel
//   SCD PATCH   PatchAlignerForward: Ĥ = z A + c + b₂ + silu(z W₁ + b₁) W₂ (F32 cuBLAS GEMMs
//               and BiasActivation / BroadcastRow);
//               K/V regeneration is the consumer's own BF16 projection (CublasGemm::Linear)
//               followed by RopeStoreKv (ops.h)
//   SEKV        SekvAttention        one softmax over segments of mixed resolution (anchors,
//                                    span summaries with their log-count, pinned tokens,
//                                    rebuilt tokens, the window), split over entries
//               SekvRouteGate        α_S for every span and KV head (the zoom-in gate)
//               SpanRebuildRows      token rows rebuilt from the CPU tier's low-rank bases
//               SekvZoom             the zoom-in on the device: span selection, token
//                                    scoring in low-rank coordinates, rebuild of the kept
//                                    rows into the expansion buffer, the step's summary
//                                    counts (no host round trip)
#ifndef SCD_KERNELS_CUDA_SCD_SEKV_OPS_H_
#define SCD_KERNELS_CUDA_SCD_SEKV_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {

// ---- SCD: codes as they travel (scd_codec.cu) ----

// A payload block's encoding (common/scd/quantize.h, same numbering): F32, F16, or int8 with
// one F16 scale per row (all row scales first, then the row-major int8 codes).
enum class CodeFormat : int32_t { kF32 = 0, kF16 = 1, kInt8Row = 2 };

// Bytes of a [rows, cols] matrix in `format` (scd::EncodedBytes for these three).
inline size_t CodeBytes(CodeFormat format, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  switch (format) {
    case CodeFormat::kF16:
      return 2 * n;
    case CodeFormat::kInt8Row:
      return 2 * static_cast<size_t>(rows) + n;
    case CodeFormat::kF32:
      break;
  }
  return 4 * n;
}

// out[rows, cols] (F32) = the matrix at `in` (device memory, CodeBytes long) decoded exactly
// as the host does: F16 widened, int8 times its row's widened scale. `in` must be 2-byte
// aligned. Twin: scd::DecodeMatrix.
absl::Status DecodeCodes(const void* in, CodeFormat format, int rows, int cols, float* out,
                         StreamHandle stream);

// ---- SCD: REUSE decode (scd_codec.cu) ----

// A layer's REUSE decoder for K or V on the device (LinearCode's decoder half).
struct LowRankDecoder {
  const float* decoder = nullptr;  // [rank, kv_dim] F32
  const float* mu = nullptr;       // [kv_dim] F32
  int rank = 0;                    // 1..kMaxCodeRank
};
inline constexpr int kMaxCodeRank = 512;

// For each row r (token):
//   k = z_k[r, :] · D_k + μ_k,   v = z_v[r, :] · D_v + μ_v          (F32, kv_dim wide)
// then RoPE at positions[r] on k (as RopeStoreKv does), and both stored as BF16 into layer
// `layer` of sequence row_seq[r] at position positions[r]. z_k rows are key.rank floats apart,
// z_v rows value.rank. Twin: LinearCode::Decode (common/scd/reduced_rank.h) for K and V, then
// cpu::ApplyRope on K and the BF16 store (the CPU backend's AppendKv).
absl::Status ReuseDecodeStoreKv(const float* z_k, const float* z_v, int rows, LowRankDecoder key,
                                LowRankDecoder value, const int32_t* row_seq,
                                const int32_t* positions, KvCacheTable cache, int layer,
                                int num_kv_heads, int head_dim, const float* inv_freq,
                                StreamHandle stream);

// ---- SCD: PATCH aligner (scd_codec.cu) ----

enum class Activation { kNone, kSilu };

// y[r, c] = act(y[r, c] + bias[c]) for rows of `cols` floats (bias may be null; silu(x) =
// x / (1 + e^{-x})). Twin: the bias and SiLU loops of PatchAligner::Apply.
absl::Status BiasActivation(float* y, const float* bias, int rows, int cols, Activation act,
                            StreamHandle stream);

// y[r, :] = row[:] for every r < rows.
absl::Status BroadcastRow(float* y, const float* row, int rows, int cols, StreamHandle stream);

// A PatchAligner (common/scd/patch_aligner.h) on the device, F32.
struct DeviceAlignerView {
  int code_dim = 0;             // r_H
  int hidden_dim = 0;           // m (0: the linear skip only)
  int out_dim = 0;              // d
  const float* a = nullptr;     // [r, d]
  const float* c_b2 = nullptr;  // [d] = c + b₂ (summed on the host in float, as the twin does)
  const float* w1 = nullptr;    // [r, m]
  const float* b1 = nullptr;    // [m]
  const float* w2 = nullptr;    // [m, d]
};

// h[rows, d] = z A + (c + b₂) + silu(z W₁ + b₁) W₂, with `hidden` [rows, m] as scratch (may
// be null when m = 0): three F32 GEMMs (CublasGemm::MatMulF32) and two elementwise kernels on
// the GEMM's stream. Twin: PatchAligner::Apply.
absl::Status PatchAlignerForward(CublasGemm& gemm, const DeviceAlignerView& f, const float* z,
                                 int rows, float* hidden, float* h);

// ---- SEKV: mixed-resolution attention (sekv.cu) ----

enum class KvType : int32_t { kF32 = 0, kBf16 = 1 };

// SekvAttention's shape limits: query heads per KV head, and head_dim.
inline constexpr int kSekvMaxGroup = 16;
inline constexpr int kSekvMaxHeadDim = 256;

// `rows` entries of one KV head: K/V rows of head_dim elements, `stride` elements apart (the
// pointers are at the head's first column), F32 or BF16. log_count (optional) is added to each
// score (c_i = |S| for a span summary); rows with skip[i] != 0 (optional) are left out.
struct AttentionSegment {
  const void* k = nullptr;
  const void* v = nullptr;
  const float* log_count = nullptr;  // [rows] or null
  const uint8_t* skip = nullptr;     // [rows] or null
  int32_t rows = 0;
  int32_t stride = 0;
  KvType type = KvType::kF32;
  int32_t pad = 0;
};

// The log-sum-exp SekvAttention gives a query head without entries.
inline constexpr float kSekvEmptyLse = -1e30f;

// One softmax per query head h over the entries of its KV head g = h / (num_heads /
// num_kv_heads): `segments` is a device array [num_kv_heads][num_segments] (unused slots have
// rows = 0). With s_i = <q_h, k_i> / sqrt(head_dim) + log_count_i over the rows not skipped:
//   out[h, :] = Σ_i softmax(s)_i v_i   (when out is non-null; zeros when no entry),
//   lse[h]    = log Σ_i e^{s_i}        (when lse is non-null; -1e30 when no entry).
// Without `out`, V is never read (the routing pass needs only the log-sum-exp). The entries
// are split into chunks over blocks and merged exactly (as DecodeAttention); `max_rows` (host)
// bounds the total rows of any KV head and sizes the split. q rows are head_dim floats apart.
// Twin: sekv::ScoreBlock + AccumulateScored + FinishAttention / LogSumExp.
// `impl` picks the split kernel as DecodeAttention's does (ops.h; kAuto: the vectorized one
// where it supports the shape).
absl::Status SekvAttention(const float* q, const AttentionSegment* segments, int num_segments,
                           int num_heads, int num_kv_heads, int head_dim, int max_rows,
                           DecodeImpl impl, float* out, float* lse, float* workspace,
                           int64_t workspace_floats, StreamHandle stream);

// Floats of `workspace` SekvAttention needs for this shape.
int64_t SekvAttentionWorkspaceFloats(int num_heads, int head_dim, int max_rows);

// Merges two softmaxes over disjoint entries of the same heads: out_a/lse_a and out_b/lse_b
// [num_heads, head_dim] / [num_heads] as SekvAttention writes them (lse -1e30 and zeros for
// no entry) become one: out = (e^{lse_a} out_a + e^{lse_b} out_b) / (e^{lse_a} + e^{lse_b}).
// `out` may be out_a. So the resident part of a step can run while the expanded rows are
// still on their way, and the rows join the same softmax after. Twin: the blockwise merge of
// sekv::PartialAttention.
absl::Status MergeAttention(const float* out_a, const float* lse_a, const float* out_b,
                            const float* lse_b, int num_heads, int head_dim, float* out,
                            StreamHandle stream);

// The summaries' log counts for one step after the zoom-in, per (KV head, span) index i of
// `total`: step_lc[i] = base_lc[i] and step_skip[i] = (remaining[i] <= 0), except at the
// `num_edits` pairs edits[2j] = i, edits[2j+1] = tokens of the span expanded now, where the
// summary stands for left = remaining[i] − expanded tokens: step_lc[i] = log(left), and it is
// skipped when left <= 0. Twin: the resident part of SekvCache::Attend.
absl::Status SekvSummaryStep(const float* base_lc, const int32_t* remaining, const int32_t* edits,
                             int num_edits, int total, float* step_lc, uint8_t* step_skip,
                             StreamHandle stream);

// ---- SEKV: zoom-in gate and span rebuild (sekv.cu) ----

struct RouterGateParams {
  float w_size = 0, w_share = 1, bias = 0, pad = 0;
};
inline constexpr int kMaxRouteDim = 128;

// For KV head g and span s, the largest over the query heads h of g's group of
//   σ(<P_kᵀ P_q q_h, k̄_s> + w_size · log_count[g, s] + w_share · (ŝ_{h,s} − lse[h]) + bias),
//   ŝ_{h,s} = <q_h, k̄_s> / sqrt(head_dim) + log_count[g, s],
// written to alpha[g, s]; 0 when remaining[g, s] == 0 (the span has no token left).
//   q          [num_heads, head_dim]
//   p_q, p_k   [num_kv_heads, route_dim, head_dim] (this layer's routing projections)
//   summary_k  span rows `summary_stride` elements apart, F32 or BF16 (`summary_type`; the
//              same rows the attention's summary segment reads); head g at column g * head_dim
//   log_count, remaining, alpha   [num_kv_heads, num_spans];  gates [num_kv_heads]
//   lse        [num_heads], the resident log-sum-exp (SekvAttention without out)
// Twin: the gate in SekvCache::Zoom (ZoomRouter::RouteQuery, Logit, sekv::Sigmoid).
absl::Status SekvRouteGate(const float* q, const float* p_q, const float* p_k, int route_dim,
                           const void* summary_k, KvType summary_type, int64_t summary_stride,
                           const float* log_count, const int32_t* remaining,
                           const RouterGateParams* gates, const float* lse, int num_spans,
                           int num_heads, int num_kv_heads, int head_dim, float* alpha,
                           StreamHandle stream);

// One token row rebuilt from a span's low-rank basis: out = us_row · vt, i.e. row i of
// (U_r Σ_r) V_rᵀ. us_row and vt may be device memory or pinned host memory (read through
// unified addressing, so the CPU tier needs no separate copy).
struct RebuildJob {
  const float* us_row = nullptr;  // [rank]
  const float* vt = nullptr;      // [rank, head_dim]
  float* out = nullptr;           // [head_dim]
  int32_t rank = 0;
  int32_t pad = 0;
};

// Runs `count` jobs of the device array `jobs` (head_dim wide). Twin:
// sekv::LowRankBasis::ReconstructRow.
absl::Status SpanRebuildRows(const RebuildJob* jobs, int count, int head_dim, StreamHandle stream);

// ---- SEKV: the zoom-in on the device (sekv.cu) ----

// One (span, KV head) of the CPU tier as SekvZoom reads it. The pointers are memory the device
// can read: device memory, pinned host memory (unified addressing), or pageable host memory on
// a system where the device reads it (DeviceReadsPageableMemory).
struct SpanBasisRef {
  const float* us_k = nullptr;  // [length, rank_k] = U_r Σ_r of the span's keys
  const float* vt_k = nullptr;  // [rank_k, head_dim] = V_rᵀ
  const float* us_v = nullptr;  // [length, rank_v], values
  const float* vt_v = nullptr;  // [rank_v, head_dim]
  int64_t pinned = -1;          // offset of the span's [length] pinned flags in SekvZoom's `pinned`
                                // (-1: no flags)
  int32_t length = 0;           // tokens of the span
  int32_t rank_k = 0, rank_v = 0;
  int32_t pad = 0;
};
inline constexpr int kMaxZoomCandidates = 1 << 20;  // candidate tokens per KV head
inline constexpr int kMaxBasisRank = 64;

struct ZoomParams {
  int32_t budget = 0;            // expanded tokens per KV head (expand_budget)
  int32_t candidate_budget = 0;  // tokens the candidate spans may hold (kSpan: = budget)
  int32_t by_token = 1;          // 1: token resolution (kToken), 0: whole spans (kSpan)
  int32_t pad = 0;
};

// The zoom-in of one layer, one block per KV head g (SekvCache::Select and the fetch, with
// nothing read back). Each candidate span's bases are read in one pass into shared memory (an
// array too large for it is read in place), so bases in host memory cost a few bus round
// trips a span:
//   1. candidate spans: those with alpha[g, s] > tau[g] and remaining[g, s] > 0, walked in
//      order of descending alpha (ties: lower s), each taken while its remaining tokens fit
//      candidate_budget (SelectSpans);
//   2. by token: every token of the candidates not pinned is weighted
//      w_t = Σ_{h ∈ g} exp(<q_h, k_t> · scale − lse[h]) in the basis' low-rank coordinates and
//      the `budget` heaviest are kept (ScoreSpanTokens, KeepHeaviest: ties by lower span, then
//      offset); by span: every token of the candidates not pinned;
//   3. the kept tokens' K and V rows (LowRankBasis::ReconstructRow) go into out_k / out_v
//      [num_kv_heads, budget, head_dim] of `out_type` (BF16 rounded to nearest even), heaviest
//      first, and their count into expansion[g * expansion_stride].rows (the expansion
//      segment SekvAttention reads next);
//   4. step_lc / step_skip [num_kv_heads, num_spans] as SekvSummaryStep with the tokens kept
//      per span as its edits;
//   5. stats[g * 4 + i] += routing rounds (1), spans expanded, tokens expanded, tokens scored.
// alpha, base_lc, remaining: [num_kv_heads, num_spans] (SekvRouteGate's alpha); bases
// [num_kv_heads, num_spans]; pinned: byte flags (SpanBasisRef::pinned), may be null; q
// [num_heads, head_dim]; lse [num_heads]; tau [num_kv_heads]; workspace: device scratch of
// SekvZoomWorkspaceBytes. The ranks must be at most kMaxBasisRank (the caller checks: they
// live in device memory) and candidate_budget at most kMaxZoomCandidates.
absl::Status SekvZoom(const float* q, const float* lse, const float* alpha, const float* tau,
                      const int32_t* remaining, const float* base_lc, const SpanBasisRef* bases,
                      const uint8_t* pinned, int num_spans, int num_heads, int num_kv_heads,
                      int head_dim, ZoomParams params, void* out_k, void* out_v, KvType out_type,
                      AttentionSegment* expansion, int expansion_stride, float* step_lc,
                      uint8_t* step_skip, int64_t* stats, void* workspace, int64_t workspace_bytes,
                      StreamHandle stream);

// SekvZoom's scratch: per KV head, kSekvZoomArrays int-sized arrays of SekvZoomPad entries
// (the candidate budget rounded up to a power of two, the size of its bitonic sort).
inline constexpr int kSekvZoomArrays = 7;
inline int SekvZoomPad(int candidate_budget) {
  int pad = 1;
  while (pad < candidate_budget) pad <<= 1;
  return pad;
}
// Bytes of SekvZoom's workspace for this shape.
inline int64_t SekvZoomWorkspaceBytes(int num_kv_heads, int candidate_budget) {
  if (num_kv_heads <= 0 || candidate_budget < 0) return 0;
  return static_cast<int64_t>(num_kv_heads) * kSekvZoomArrays * SekvZoomPad(candidate_budget) *
         static_cast<int64_t>(sizeof(int32_t));
}

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_SCD_SEKV_OPS_H_
