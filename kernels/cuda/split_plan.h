// How the split-K attention launchers cut their keys into chunks, one block per chunk: decode
// attention (attention_decode.cu) and SEKV's mixed-resolution attention (sekv.cu), with
// DecodeAttention's shape limits and workspace size. Host code only, CUDA-free, so that the
// CPU stand-ins of the launchers (tests/gpu/standin/) check callers against the same plan and
// limits the kernels use: a workspace sized for it, and every row inside splits * chunk.
#ifndef SCD_KERNELS_CUDA_SPLIT_PLAN_H_
#define SCD_KERNELS_CUDA_SPLIT_PLAN_H_

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace scd::cuda::split_plan {

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- DecodeAttention ----
inline constexpr int kDecodeScoreFloats = 8192;     // shared memory for scores: group * chunk
inline constexpr int kDecodeMaxQueryFloats = 4096;  // group * head_dim
inline constexpr int kDecodeTargetBlocks = 264;     // ~2 waves on a 132-SM H100/H200

struct DecodeSplits {
  int chunk = 0;
  int splits = 0;
};

// Chunks of at least 64 keys (multiples of 32), as many as make about kDecodeTargetBlocks
// blocks over batch x KV heads, and small enough that group * chunk scores fit. Not monotonic
// in max_length: a workspace must be sized with the call's own max_length.
inline DecodeSplits Decode(int batch, int max_length, int num_heads, int num_kv_heads) {
  const int group = num_heads / num_kv_heads;
  const int64_t base_blocks = static_cast<int64_t>(batch) * num_kv_heads;
  const int64_t want_splits = std::max<int64_t>(1, CeilDiv(kDecodeTargetBlocks, base_blocks));
  int64_t chunk = CeilDiv(std::max(max_length, 1), want_splits);
  chunk = std::max<int64_t>(64, CeilDiv(chunk, 32) * 32);
  const int64_t max_chunk = std::max(32, kDecodeScoreFloats / group / 32 * 32);
  chunk = std::min(chunk, max_chunk);
  DecodeSplits plan;
  plan.chunk = static_cast<int>(chunk);
  plan.splits = static_cast<int>(CeilDiv(std::max(max_length, 1), chunk));
  return plan;
}

// The max_length the CUDA backend plans a decode step's attention for: the next power of two
// at or above max_length, at least 256. One captured step (a CUDA graph) then serves every
// step until the batch's longest sequence passes the bucket; DecodeAttention spreads each
// row's own keys over the splits, so the larger plan costs only idle blocks.
inline int DecodeLengthBucket(int max_length) {
  if (max_length > (1 << 30)) return max_length;  // no larger power of two fits an int
  int bucket = 256;
  while (bucket < max_length) bucket *= 2;
  return bucket;
}

// Floats of DecodeAttention's workspace: partial output, max and sum per query head and split.
inline int64_t DecodeWorkspaceFloats(int batch, int max_length, int num_heads, int num_kv_heads,
                                     int head_dim) {
  if (batch <= 0 || num_kv_heads <= 0) return 0;
  const DecodeSplits plan = Decode(batch, max_length, num_heads, num_kv_heads);
  return static_cast<int64_t>(batch) * num_heads * plan.splits * (head_dim + 2);
}

// DecodeAttention's shape errors, before anything is launched.
inline absl::Status CheckDecodeShape(int batch, int num_heads, int num_kv_heads, int head_dim) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || num_kv_heads > 65535 || batch > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("DecodeAttention: bad shape (batch ", batch,
                                                   ", heads ", num_heads, "/", num_kv_heads, ")"));
  }
  const int group = num_heads / num_kv_heads;
  if (head_dim <= 0 || group * head_dim > kDecodeMaxQueryFloats) {
    return absl::InvalidArgumentError(absl::StrCat("DecodeAttention: group ", group, " x head_dim ",
                                                   head_dim, " exceeds ", kDecodeMaxQueryFloats));
  }
  if (group > kDecodeScoreFloats / 32) {  // even the smallest chunk (32) would pass 48 KB
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeAttention: group ", group, " exceeds ", kDecodeScoreFloats / 32));
  }
  return absl::OkStatus();
}

// ---- SekvAttention ----
inline constexpr int kSekvMinChunk = 64;
inline constexpr int kSekvMaxChunk = 256;
inline constexpr int kSekvWantSplits = 64;  // chunks per KV head when rows allow

// Rows per block for `max_rows` entries per KV head: a multiple of 32 in [64, 256].
inline int SekvChunk(int max_rows) {
  const int64_t want = CeilDiv(std::max(max_rows, 1), kSekvWantSplits);
  const int64_t rounded = CeilDiv(want, 32) * 32;
  return static_cast<int>(
      std::min<int64_t>(kSekvMaxChunk, std::max<int64_t>(kSekvMinChunk, rounded)));
}

// Blocks per KV head; the kernel covers SekvSplits(max_rows) * SekvChunk(max_rows) rows.
inline int SekvSplits(int max_rows) {
  return static_cast<int>(CeilDiv(std::max(max_rows, 1), SekvChunk(max_rows)));
}

}  // namespace scd::cuda::split_plan

#endif  // SCD_KERNELS_CUDA_SPLIT_PLAN_H_
