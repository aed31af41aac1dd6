// ScdGpuRebuilder: SCD's consumer-side rebuild on the GPU: a payload's per-layer
// codes go from host memory to the consumer's KV cache without a host-side decode.
//   REUSE layer: ReuseDecodeStoreKv (low-rank decode + RoPE + BF16 store, one kernel);
//   PATCH layer: PatchAlignerForward → BF16 → the consumer's [W_K; W_V] as one cuBLAS GEMM
//                (+ biases) → RopeStoreKv.
// Transfers overlap with compute: the codes are staged into a pinned buffer (where a UCX
// receive would land them), and each layer's upload runs on a copy stream, recorded by an
// event the compute stream waits on, so layer l + 1 crosses PCIe while layer l is decoded.
//
// The spec is plain host arrays (no dependency on common/scd, which sits above the backends);
// tests/gpu/parity and scd-gpu-bench build it from an ScdArtifact or at random. CUDA-free header.
#ifndef SCD_KERNELS_CUDA_SCD_REBUILDER_H_
#define SCD_KERNELS_CUDA_SCD_REBUILDER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda {

// The two ways a layer's K/V are rebuilt; a layer of the spec may have either or both (each
// call picks one per layer: LayerCodes::part), so that one rebuilder serves scd payloads (PATCH
// on the artifact's selected layers), scd-reuse payloads (REUSE everywhere) and any subset.
enum class RebuildPart { kReuse, kPatch };

struct RebuildLayerSpec {
  // A part is present when any of its fields is set (RebuildSpec::Validate then checks them all).
  // REUSE part: the K and V decoders (LinearCode::decoder, mu_out).
  int rank_k = 0, rank_v = 0;
  std::vector<float> dec_k, mu_k;  // [rank_k, kv_dim], [kv_dim]
  std::vector<float> dec_v, mu_v;  // [rank_v, kv_dim], [kv_dim]
  // PATCH part: the aligner (PatchAligner fields, c_b2 = c + b₂)
  // and the consumer's own K and V projections of this layer in the HF layout, stacked:
  // w_kv = [W_K; W_V] [2 kv_dim, d].
  int code_dim = 0, hidden_dim = 0;
  std::vector<float> a, c_b2, w1, b1, w2;
  std::vector<float> w_kv;
  std::vector<float> b_kv;  // [2 kv_dim] or empty (no q/k/v biases)

  bool has_reuse() const { return rank_k > 0 || rank_v > 0 || !dec_k.empty() || !dec_v.empty(); }
  bool has_patch() const { return code_dim > 0 || !a.empty() || !w_kv.empty(); }
  bool has(RebuildPart part) const {
    return part == RebuildPart::kReuse ? has_reuse() : has_patch();
  }
};

struct RebuildSpec {
  int hidden_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  std::vector<float> inv_freq;  // [head_dim / 2], the consumer's RoPE frequencies
  std::vector<RebuildLayerSpec> layers;

  int kv_dim() const { return num_kv_heads * head_dim; }
  absl::Status Validate() const;
};

// One layer's codes in host memory, as they travel (`format`, scd_sekv_ops.h: F32, or a
// payload block's F16 or int8-row bytes, decoded on the device), for one of the layer's parts.
// REUSE: z_k [T, rank_k] and z_v [T, rank_v]; PATCH: z_k is the H_in code [T, code_dim] and
// z_v is unused.
struct LayerCodes {
  const void* z_k = nullptr;
  const void* z_v = nullptr;
  CodeFormat format = CodeFormat::kF32;
  RebuildPart part = RebuildPart::kReuse;
};

struct RebuildTimes {
  double stage_ms = 0;  // host: codes copied into the pinned staging buffer
  double gpu_ms = 0;    // device: first upload to the last store (events on the streams);
                        // includes any wait of the copy stream for the host's staging
  double total_ms = 0;  // host wall time of Rebuild
};

class ScdGpuRebuilder {
 public:
  // Uploads the decoders, aligners and projections (BF16 for w_kv) and takes every buffer a
  // call of up to `max_tokens` positions needs (whichever part each layer is rebuilt with):
  // Rebuild allocates nothing.
  static absl::StatusOr<std::unique_ptr<ScdGpuRebuilder>> Create(const RebuildSpec& spec,
                                                                 int max_tokens);
  ~ScdGpuRebuilder();

  // Rebuilds `tokens` positions of every layer into `target` at positions [target.length,
  // target.length + tokens) (codes[l] for layer l, by its part; the cache layout of ops.h) and
  // waits for the device. Fails without touching the cache on a shape error or a part the
  // layer does not have. Does not change target.length.
  absl::Status Rebuild(absl::Span<const LayerCodes> codes, int tokens, const SequenceCache& target,
                       RebuildTimes* times = nullptr);

  int max_tokens() const;
  // Device bytes of the decoders, aligners and projections.
  size_t weight_bytes() const { return weight_bytes_; }
  // Every device byte it holds (the weights, its buffers and its cuBLAS workspace), and its
  // pinned host bytes.
  size_t device_bytes() const;
  size_t pinned_bytes() const;

 private:
  struct Impl;
  explicit ScdGpuRebuilder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  size_t weight_bytes_ = 0;
};

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_SCD_REBUILDER_H_
