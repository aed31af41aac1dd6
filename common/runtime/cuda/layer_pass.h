// LayerPass: the CUDA backend's forward pass over a step's rows (CudaBackend, cuda_backend.cc,
// runs it for prefill and decode alike). Per layer, mirroring CpuBackend step for step:
//   xn = RMSNorm(x)                  -> BF16 (and F32 for the H_in hook)
//   qkv = xn · [Wq; Wk; Wv]ᵀ (+ b)   one cuBLAS GEMM, F32 out; hooks copy H_in, K, V here
//   RoPE(q) in place; RoPE(k) and v stored into the sequence's BF16 KV cache
//   att = attention(q, cache)        prefill: flash-style tiles; decode: split-K per sequence
//   x += att · Woᵀ                   GEMM with beta = 1 (residual fused)
//   x += SwiGLU(RMSNorm(x) · [Wgate; Wup]ᵀ) · Wdownᵀ
// then, in Logits, the final RMSNorm and the LM head. It owns the activation buffers, grown on
// demand, and marks every operation on the backend's OpClock. CUDA-free header.
#ifndef SCD_COMMON_RUNTIME_CUDA_LAYER_PASS_H_
#define SCD_COMMON_RUNTIME_CUDA_LAYER_PASS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/model/config.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda/device_weights.h"
#include "common/runtime/cuda/kernel_choices.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/op_profile.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {

// How the attention of a step reads the cache.
struct AttentionStep {
  bool decode = false;
  // Prefill: one sequence, queries at positions [start, start + rows).
  const Bf16* k0 = nullptr;
  const Bf16* v0 = nullptr;
  int64_t layer_stride = 0;
  int start = 0;
  // Decode: row b is sequence b of the table, attending to lengths[b] positions, with
  // DecodeAttention's workspace of `workspace_floats` floats.
  const int32_t* lengths = nullptr;
  int max_length = 0;
  float* workspace = nullptr;
  int64_t workspace_floats = 0;
  // Decode: the last external.size() rows belong to no sequence of the table; row
  // rows - external.size() + i takes external[i]'s attention, with K rotated in place.
  absl::Span<RowAttention* const> external;
};

class LayerPass {
 public:
  // Everything it reads must outlive it: the model's config and device weights, the GEMMs,
  // RoPE's inverse frequencies on the device and the clock; all its work goes to `stream`.
  LayerPass(const ModelConfig& config, const DeviceWeights& weights, CublasGemm& gemm,
            const float* inv_freq, OpClock& clock, StreamHandle stream)
      : config_(&config),
        weights_(&weights),
        gemm_(&gemm),
        inv_freq_(inv_freq),
        clock_(&clock),
        stream_(stream) {}

  // The kernel choices the backend runs (SetKernelChoices has checked them); Forward launches
  // the attention kernels they name. kAuto's until set.
  void set_kernels(const KernelChoices& kernels) { kernels_ = kernels; }
  const KernelChoices& kernels() const { return kernels_; }

  // Grows the activation buffers to `rows` rows, and with `hooks` the H_in hook and the
  // hooks' copies of every layer (the stream is idle between calls).
  absl::Status Reserve(int rows, bool hooks);

  // Runs every layer on `rows` rows (ids on the device) and leaves the residual stream in x().
  // Writes each row's K/V into its sequence's cache (lengths are committed by the caller).
  // With `hooks`, layer l's [rows][d] H_in then [rows][2 kv_dim] pre-RoPE K | V go to hooks()
  // at l * rows * HookWidth().
  absl::Status Forward(int rows, const int32_t* ids, const int32_t* positions,
                       const int32_t* row_seq, const KvCacheTable& table,
                       const AttentionStep& attention, bool hooks);

  // The final RMSNorm of `rows` rows of the residual stream from `x`, and the LM head into
  // `logits` (the end of a profiled pass).
  absl::Status Logits(const float* x, int rows, float* logits);

  // Floats a row of one layer's hooks takes: H_in, then K and V.
  int HookWidth() const { return config_->hidden_size + 2 * config_->kv_dim(); }
  // A prefill of `t` tokens' hooks, as copied back from hooks(), into LayerStates.
  void UnpackHooks(const std::vector<float>& hooks, int t, std::vector<LayerStates>* out) const;

  float* x() const { return x_.as<float>(); }
  const DeviceBuffer& hooks() const { return hooks_; }
  // The device memory its buffers take.
  size_t DeviceBytes() const;
  // The buffers a decode graph records (all but the hooks'), each address then size.
  void AppendGraphBuffers(std::vector<uintptr_t>* out) const;

 private:
  // Forward's steps for layer l: the QKV projection (and the hooks) with RoPE on the queries;
  // the attention of the plain rows through the cache and of the external rows through their
  // own; the output projection and the FFN, both added to the residual stream.
  absl::Status LayerQkv(int l, int rows, const int32_t* positions, bool hooks);
  absl::Status LayerAttention(int l, int rows, const int32_t* positions, const int32_t* row_seq,
                              const KvCacheTable& table, const AttentionStep& attention);
  absl::Status LayerOutAndFfn(int l, int rows);

  const ModelConfig* config_;
  const DeviceWeights* weights_;
  CublasGemm* gemm_;
  const float* inv_freq_;
  OpClock* clock_;
  StreamHandle stream_;
  KernelChoices kernels_;
  DeviceBuffer x_, xn_, xn_bf16_, qkv_, att_, att_bf16_, gate_up_, act_bf16_, hooks_;
};

}  // namespace scd::cuda

#endif  // SCD_COMMON_RUNTIME_CUDA_LAYER_PASS_H_
