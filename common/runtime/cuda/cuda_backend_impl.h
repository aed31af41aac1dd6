// CudaBackend's class, shared by the two files that implement it: cuda_backend.cc (set-up,
// sequences, workspaces, prefill, external KV, and the hooks of backend_access.h) and
// cuda_decode_step.cc (the batched decode step, graphed or eager). The contract it keeps
// (precision, one stream, one caller at a time) is cuda_backend.cc's file comment.
// CUDA-free header, private to common/runtime/cuda.
#ifndef SCD_COMMON_RUNTIME_CUDA_CUDA_BACKEND_IMPL_H_
#define SCD_COMMON_RUNTIME_CUDA_CUDA_BACKEND_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda/decode_graph_cache.h"
#include "common/runtime/cuda/device_weights.h"
#include "common/runtime/cuda/kernel_choices.h"
#include "common/runtime/cuda/layer_pass.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/op_profile.h"
#include "kernels/cuda/ops.h"

namespace scd::cuda {

class CudaSequence : public Sequence {
 public:
  int length() const override { return length_; }
  int capacity() const override { return capacity_; }

  const void* owner_ = nullptr;  // the backend that created it
  int capacity_ = 0;
  int length_ = 0;
  DeviceBuffer k_;            // BF16 [num_layers][capacity][kv_dim], RoPE applied
  DeviceBuffer v_;            // BF16 [num_layers][capacity][kv_dim]
  DeviceBuffer last_logits_;  // F32 [vocab]: logits after the last position
  bool has_last_logits_ = false;
};

// Per-step metadata gathered on the host and uploaded in one copy. Add() returns the byte
// offset of an array inside the upload; CudaBackend::Dev() turns it into a device pointer.
class StepMeta {
 public:
  template <typename T>
  size_t Add(const T* data, size_t count) {
    const size_t offset = (bytes_.size() + 15) / 16 * 16;
    bytes_.resize(offset + count * sizeof(T));
    if (count > 0) std::memcpy(bytes_.data() + offset, data, count * sizeof(T));
    return offset;
  }
  const std::vector<unsigned char>& bytes() const { return bytes_; }

 private:
  std::vector<unsigned char> bytes_;
};

class CudaBackend : public Backend {
 public:
  using MakeWeights = std::function<absl::StatusOr<std::unique_ptr<DeviceWeights>>(StreamHandle)>;
  static absl::StatusOr<std::unique_ptr<Backend>> Create(std::shared_ptr<const Model> model,
                                                         const MakeWeights& make_weights);

  int device() const { return device_; }

  std::string_view name() const override { return "cuda"; }
  std::string device_description() const override { return DeviceDescription(device_); }
  const Model& model() const override { return *model_; }
  size_t decode_bytes_streamed() const { return weights_->DecodeBytesStreamed(); }

  absl::Status SetDecodeGraphs(const DecodeGraphOptions& options) {
    return graphs_.Configure(options);
  }
  absl::Status SetKernelChoices(const KernelChoices& choices);
  const KernelChoices& kernel_choices() const { return pass_->kernels(); }
  OpClock& op_clock() { return clock_; }

  std::string kernel_description() const override {
    return DescribeKernelChoices(model_->config, pass_->kernels());
  }

  DecodeGraphStats decode_graph_stats() const override { return graphs_.stats(); }

  absl::StatusOr<SequenceCache> CacheOf(Sequence& seq_base) const;
  absl::Status CommitPositions(Sequence& seq_base, int tokens) const;

  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence(int capacity) override;
  size_t SequenceBytes(int capacity) const override {
    return 2 * CacheBytes(std::max(capacity, 0)) + LogitsBytes();
  }
  absl::StatusOr<DeviceMemory> DeviceMemoryNow() const override;
  absl::Status ReserveWorkspace(const WorkspaceShape& shape) override;
  WorkspaceBytes Workspace() const override;

  absl::Status Prefill(Sequence& seq_base, absl::Span<const int32_t> tokens,
                       const PrefillOptions& options, PrefillResult* result) override;
  absl::Status AppendKv(Sequence& seq_base, const ExternalKv& kv) override;

  // cuda_decode_step.cc.
  absl::Status Decode(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                      std::vector<float>* logits) override;
  // Samples on the device (SampleRows): only the token ids come back.
  absl::Status DecodeSample(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                            absl::Span<const SampleDraw> draws,
                            std::vector<int32_t>* next) override;
  // The sequences' rows sampled on the device as DecodeSample's, the external rows' logits
  // copied back; one wait for both.
  absl::Status DecodeMixed(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                           absl::Span<const SampleDraw> draws, std::vector<int32_t>* next,
                           const ExternalRows& external,
                           std::vector<std::vector<float>>* external_logits) override;

 private:
  static constexpr size_t kAppendStagingBytes = size_t{256} << 20;

  // A decode step's rows as the host gathers them: the sequences' ids, positions, each row's
  // sequence, attention lengths and logits destinations, then the external rows' ids and
  // positions.
  struct DecodeRows {
    std::vector<CudaSequence*> batch;
    std::vector<int32_t> ids, positions, row_seq, lengths;
    std::vector<float*> logits_dst;
    int max_length = 0;
  };
  // Where a decode step's arrays lie in its uploaded metadata, and its cache table.
  struct DecodeMeta {
    size_t ids_at = 0, pos_at = 0, row_seq_at = 0, len_at = 0, dst_at = 0, params_at = 0;
    KvCacheTable table;
  };

  explicit CudaBackend(std::shared_ptr<const Model> model) : model_(std::move(model)) {}

  StreamHandle stream() const { return stream_->handle(); }

  // A sequence's K (or V) cache of `capacity` positions, BF16; and its last logits.
  size_t CacheBytes(int capacity) const {
    const ModelConfig& c = model_->config;
    return static_cast<size_t>(c.num_layers) * capacity * c.kv_dim() * sizeof(Bf16);
  }
  size_t LogitsBytes() const { return sizeof(float) * model_->config.vocab_size; }

  // Decode attention's workspace for `batch` sequences at a planned length, grown to a power
  // of two: a buffer that moves strands every graph recorded over it.
  size_t DecodeWorkspaceBytes(int batch, int planned_length) const;
  // SampleRows' workspace for `batch` rows, then the sampled ids.
  absl::StatusOr<size_t> SampleWorkspaceBytes(int batch) const;
  // AppendKv's staging for `tokens` positions: as many layers' pre-RoPE K | V as fit
  // kAppendStagingBytes (one at least), at most every layer.
  size_t AppendStagingBytes(int tokens) const;
  // The most a step's metadata (StepMeta) takes for `rows` rows of `seqs` sequences: ids,
  // positions and each row's sequence per row; lengths, logits destinations, the cache table
  // (K, V, stride) and sampling parameters per sequence; each of the 9 arrays 16-byte aligned.
  static size_t MetaBytesBound(size_t rows, size_t seqs) {
    return 9 * 16 + rows * 3 * sizeof(int32_t) +
           seqs * (sizeof(int32_t) + sizeof(float*) + 2 * sizeof(Bf16*) + sizeof(int64_t) +
                   sizeof(SampleParams));
  }
  // ReserveWorkspace's decode attention and sampling workspaces: every batch up to
  // `decode_rows` sequences, at every length bucket up to `decode_length`.
  absl::Status ReserveDecodeWorkspaces(int decode_rows, int decode_length);

  // The buffers every decode graph records, with their sizes: activations, logits, the
  // attention workspace and the step metadata (DecodeGraphCache drops its graphs when one
  // moves).
  std::vector<uintptr_t> GraphBuffers() const;

  absl::StatusOr<CudaSequence*> Own(Sequence* seq) const {
    auto* cuda_seq = dynamic_cast<CudaSequence*>(seq);
    if (cuda_seq == nullptr || cuda_seq->owner_ != this) {
      return absl::InvalidArgumentError("sequence was not created by this CUDA backend");
    }
    return cuda_seq;
  }

  // Adds the cache table of `seqs` to `meta`; the pointers it returns are offsets into the
  // upload until Relocate() turns them into device addresses.
  absl::StatusOr<KvCacheTable> AddTable(const std::vector<CudaSequence*>& seqs,
                                        StepMeta* meta) const;

  KvCacheTable Relocate(KvCacheTable table) const {
    table.k = Dev<Bf16* const>(reinterpret_cast<size_t>(table.k));
    table.v = Dev<Bf16* const>(reinterpret_cast<size_t>(table.v));
    table.layer_stride = Dev<const int64_t>(reinterpret_cast<size_t>(table.layer_stride));
    return table;
  }

  template <typename T>
  T* Dev(size_t offset) const {
    return reinterpret_cast<T*>(meta_dev_.as<unsigned char>() + offset);
  }

  absl::Status Upload(const StepMeta& meta);

  // Prefill's steps (cuda_backend.cc): the checks of a prompt before any work; the forward
  // pass of its `t` tokens, which uploads their metadata and says where the ids lie; the
  // logits of rows [first, t) and the prompt's surprisal on the device; and the results back.
  absl::Status CheckPrefill(const CudaSequence& seq, absl::Span<const int32_t> tokens,
                            const PrefillOptions& options) const;
  absl::StatusOr<size_t> ForwardPrefill(CudaSequence& seq, absl::Span<const int32_t> tokens,
                                        const PrefillOptions& options);
  absl::Status PrefillLogits(CudaSequence& seq, int t, int first, size_t ids_at,
                             const PrefillOptions& options);
  absl::Status TakePrefillResults(int t, int first, const PrefillOptions& options,
                                  PrefillResult* result);

  // One decode step of `seqs` and, after their rows, `external`'s. The sequences' rows: with
  // `next`, sampled on the device with `draws` into *next, else their logits into *logits.
  // External rows' logits go to *external_logits. A step of the sequences alone is recorded
  // and replayed as a CUDA graph (graphs_); one with external rows runs eagerly, as
  // their attention waits on the host.
  absl::Status DecodeStep(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                          absl::Span<const SampleDraw> draws, std::vector<float>* logits,
                          std::vector<int32_t>* next, const ExternalRows& external,
                          std::vector<std::vector<float>>* external_logits);
  // DecodeStep's steps (cuda_decode_step.cc), in order.
  absl::StatusOr<DecodeRows> GatherDecodeRows(absl::Span<Sequence* const> seqs,
                                              absl::Span<const int32_t> tokens,
                                              const ExternalRows& external) const;
  absl::StatusOr<DecodeMeta> UploadDecodeMeta(const DecodeRows& rows, int b,
                                              absl::Span<const SampleDraw> draws, bool sample);
  absl::Status ForwardDecode(const DecodeMeta& meta, int b, int e, int planned_length,
                             const ExternalRows& external);
  absl::Status CopyDecodeResults(const DecodeMeta& meta, int b, int e, bool sample,
                                 size_t plain_bytes);
  void TakeDecodeResults(int b, int e, bool sample, size_t plain_bytes, std::vector<float>* logits,
                         std::vector<int32_t>* next,
                         std::vector<std::vector<float>>* external_logits) const;

  std::shared_ptr<const Model> model_;
  int device_ = 0;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<CublasGemm> gemm_;
  std::unique_ptr<DeviceWeights> weights_;
  DeviceBuffer inv_freq_;
  // Step metadata (ids, positions, cache table) and activations, grown on demand.
  PinnedBuffer meta_pinned_;
  DeviceBuffer meta_dev_;
  std::unique_ptr<LayerPass> pass_;
  DeviceBuffer logits_, nll_, decode_ws_, append_stage_;
  DeviceBuffer sample_ws_;  // SampleRows workspace, then the sampled ids
  PinnedBuffer pinned_;     // results back to the host, AppendKv uploads
  OpClock clock_;           // SetOpProfiling
  DecodeGraphCache graphs_;
};

}  // namespace scd::cuda

#endif  // SCD_COMMON_RUNTIME_CUDA_CUDA_BACKEND_IMPL_H_
