// The checks a CUDA launcher (ops.h, scd_sekv_ops.h) makes before it queues anything: the
// kernels' shape limits and the sizes of the workspaces handed to them. A call that fails one
// is refused with INVALID_ARGUMENT and the message below. Host code only, CUDA-free, like
// split_plan.h, so that the launchers (kernels/cuda/*.cu) and their CPU stand-ins
// (tests/gpu/standin/) refuse exactly the same calls with the same words: a caller the stand-ins
// accept in CI is one the device accepts too.
#ifndef SCD_KERNELS_CUDA_LAUNCH_CHECKS_H_
#define SCD_KERNELS_CUDA_LAUNCH_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda::launch_checks {

// A workspace of `have` units where the call needs `need`: "<what>: workspace holds <have>
// <units>, needs <need>".
inline absl::Status Workspace(const char* what, int64_t have, int64_t need, const char* units) {
  if (have >= need) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": workspace holds ", have, " ", units, ", needs ", need));
}

// launch(std::integral_constant<int, v>{}) for the v of kFirst, kRest... equal to `value`: a
// runtime shape to the kernel template instance built for it (head_dim 64 or 128, GQA group 1, 2, 4
// or 8); INVALID_ARGUMENT `unsupported` when none is.
template <int kFirst, int... kRest, typename Launch>
absl::Status WithIntConstant(int value, const char* unsupported, Launch&& launch) {
  if (value == kFirst) return launch(std::integral_constant<int, kFirst>{});
  if constexpr (sizeof...(kRest) > 0) {
    return WithIntConstant<kRest...>(value, unsupported, launch);
  } else {
    return absl::InvalidArgumentError(unsupported);
  }
}

// ---- RoPE (RopeStoreKv, ApplyRope, the REUSE decode): tables of head_dim / 2 angles ----
inline constexpr int kRopeMaxHalf = 256;

inline absl::Status RopeHeadDim(int head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim / 2 > kRopeMaxHalf) {
    return absl::InvalidArgumentError(
        absl::StrCat("RoPE needs an even head_dim <= ", 2 * kRopeMaxHalf, ", got ", head_dim));
  }
  return absl::OkStatus();
}

// ---- PrefillAttention ----
inline constexpr int kPrefillMaxHeadDim = 256;  // the generic (F32) path

inline bool TensorCoreHeadDim(int head_dim) { return head_dim == 64 || head_dim == 128; }

inline bool PrefillSupports(AttentionImpl impl, int head_dim) {
  switch (impl) {
    case AttentionImpl::kAuto:
    case AttentionImpl::kGeneric:
      return head_dim > 0 && head_dim <= kPrefillMaxHeadDim;
    case AttentionImpl::kTensorCore:
    case AttentionImpl::kTensorCoreMma:
      return TensorCoreHeadDim(head_dim);
  }
  return false;
}

// Checks a PrefillAttention call; true when it takes a tensor-core path: asked for (kTensorCore
// or kTensorCoreMma), or kAuto with head_dim 64 or 128 and K/V 16-byte aligned (which that path
// needs).
inline absl::StatusOr<bool> PrefillTensorCores(const void* k, const void* v, int num_heads,
                                               int num_kv_heads, int head_dim, AttentionImpl impl) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || num_heads > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("PrefillAttention: ", num_heads,
                                                   " query heads do not group over ", num_kv_heads,
                                                   " KV heads"));
  }
  if (!PrefillSupports(impl, head_dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrefillAttention: head_dim ", head_dim, " unsupported by this path"));
  }
  const bool aligned =
      reinterpret_cast<uintptr_t>(k) % 16 == 0 && reinterpret_cast<uintptr_t>(v) % 16 == 0;
  const bool tensor_cores =
      impl == AttentionImpl::kTensorCore || impl == AttentionImpl::kTensorCoreMma ||
      (impl == AttentionImpl::kAuto && TensorCoreHeadDim(head_dim) && aligned);
  if (tensor_cores && !aligned) {
    return absl::InvalidArgumentError(
        "PrefillAttention: tensor-core path needs 16-byte aligned K/V");
  }
  return tensor_cores;
}

// ---- DecodeAttention and SekvAttention: the vectorized split kernels (attention_split.cuh) ----
inline constexpr int kVectorizedMaxGroupDims = 1024;  // group * head_dim: 8 warps' sums

// A row of head_dim is head_dim / 8 lanes of 8 dims, a power of two up to a warp, and the
// group is a template argument (1, 2, 4 or 8).
inline bool VectorizedAttentionSupports(int group, int head_dim) {
  const int lanes = head_dim / 8;
  const bool lanes_ok =
      head_dim > 0 && head_dim % 8 == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0;
  const bool group_ok = group == 1 || group == 2 || group == 4 || group == 8;
  return lanes_ok && group_ok && group * head_dim <= kVectorizedMaxGroupDims;
}

// Checks a DecodeAttention or SekvAttention call's kernel choice (`what` names it, after its
// shape checks); true when it runs the vectorized kernel: asked for, or kAuto on a shape that
// kernel supports.
inline absl::StatusOr<bool> TakesVectorized(const char* what, int num_heads, int num_kv_heads,
                                            int head_dim, DecodeImpl impl) {
  const bool supported = VectorizedAttentionSupports(num_heads / num_kv_heads, head_dim);
  if (impl == DecodeImpl::kVectorized && !supported) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the vectorized kernel does not take group ", num_heads / num_kv_heads,
                     " x head_dim ", head_dim));
  }
  return impl != DecodeImpl::kGeneric && supported;
}

// ---- SampleRows ----
inline absl::Status SampleShape(int rows, int vocab) {
  if (rows <= 0 || vocab <= 0 || static_cast<int64_t>(rows) * vocab > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleRows: ", rows, " rows of ", vocab, " logits is out of range"));
  }
  return absl::OkStatus();
}

// ---- ReuseDecodeStoreKv: a block decodes kReuseTokens tokens, their codes and RoPE angles
// in shared memory ----
inline constexpr int kReuseTokens = 8;
inline constexpr size_t kBlockSharedBytes = 48 * 1024;  // without the opt-in

// Its dynamic shared memory: the block's K and V codes and head_dim / 2 cosines and sines per
// token.
inline size_t ReuseDecodeSharedBytes(int head_dim, int rank_k, int rank_v) {
  return sizeof(float) * (static_cast<size_t>(kReuseTokens) * (rank_k + rank_v + head_dim));
}

inline absl::Status ReuseDecode(int head_dim, int rank_k, int rank_v) {
  if (absl::Status s = RopeHeadDim(head_dim); !s.ok()) return s;
  if (rank_k <= 0 || rank_k > kMaxCodeRank || rank_v <= 0 || rank_v > kMaxCodeRank) {
    return absl::InvalidArgumentError(absl::StrCat("REUSE ranks must be in [1, ", kMaxCodeRank,
                                                   "], got ", rank_k, " and ", rank_v));
  }
  const size_t smem = ReuseDecodeSharedBytes(head_dim, rank_k, rank_v);
  if (smem > kBlockSharedBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("REUSE decode needs ", smem, " bytes of shared memory (ranks ", rank_k,
                     " and ", rank_v, ", head_dim ", head_dim, "), above the 48 KB a block gets"));
  }
  return absl::OkStatus();
}

// ---- SEKV (sekv.cu): one block per KV head or split, its query heads' rows in registers ----
inline constexpr int kSekvMaxSegments = 16;  // segments per KV head in one SekvAttention

inline absl::Status SekvShape(const char* what, int num_heads, int num_kv_heads, int head_dim) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 ||
      num_heads / num_kv_heads > kSekvMaxGroup || num_kv_heads > 65535 || head_dim <= 0 ||
      head_dim > kSekvMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unsupported shape (heads ", num_heads, "/", num_kv_heads,
                     ", head_dim ", head_dim, "; at most ", kSekvMaxGroup,
                     " query heads per KV head and head_dim ", kSekvMaxHeadDim, ")"));
  }
  return absl::OkStatus();
}

inline absl::Status SekvSegments(int num_segments, int max_rows) {
  if (num_segments <= 0 || num_segments > kSekvMaxSegments || max_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SekvAttention: ", num_segments,
                                                   " segments per KV head (1..", kSekvMaxSegments,
                                                   "), max_rows ", max_rows));
  }
  return absl::OkStatus();
}

inline absl::Status RouteDim(int route_dim) {
  if (route_dim <= 0 || route_dim > kMaxRouteDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("SekvRouteGate: route_dim ", route_dim, " outside 1..", kMaxRouteDim));
  }
  return absl::OkStatus();
}

// A launcher of rows of head_dim floats (SpanRebuildRows, MergeAttention).
inline absl::Status PositiveHeadDim(const char* what, int head_dim) {
  if (head_dim <= 0)
    return absl::InvalidArgumentError(absl::StrCat(what, ": head_dim must be > 0"));
  return absl::OkStatus();
}

// SekvZoom's spans, budgets and workspace (SekvZoomWorkspaceBytes for its KV heads and
// candidate budget), after SekvShape.
inline absl::Status Zoom(int num_spans, const ZoomParams& params, int num_kv_heads,
                         const void* workspace, int64_t workspace_bytes) {
  if (num_spans < 0 || params.budget < 0 || params.candidate_budget < 0 ||
      params.candidate_budget > kMaxZoomCandidates) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SekvZoom: ", num_spans, " spans, budget ", params.budget, " and candidate budget ",
        params.candidate_budget, " (at most ", kMaxZoomCandidates, ")"));
  }
  const int64_t need = SekvZoomWorkspaceBytes(num_kv_heads, params.candidate_budget);
  if (workspace == nullptr || workspace_bytes < need) {
    return absl::InvalidArgumentError(absl::StrCat("SekvZoom: a workspace of ", workspace_bytes,
                                                   " bytes where ", need, " are needed"));
  }
  return absl::OkStatus();
}

}  // namespace scd::cuda::launch_checks

#endif  // SCD_KERNELS_CUDA_LAUNCH_CHECKS_H_
