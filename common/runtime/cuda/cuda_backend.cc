// CudaBackend: the Backend interface on one CUDA device, mirroring CpuBackend
// (common/runtime/cpu_backend.cc) step for step; only where tensors live and their precision
// differ. The layers of a step run in cuda::LayerPass (layer_pass.h), then surprisal (device
// NLL) and one copy of the logits back; decode steps are recorded and replayed as CUDA graphs
// (cuda::DecodeGraphCache, decode_graph_cache.h).
//
// Precision (documented contract, see tests/gpu/parity/backend_test.cc for the tolerances): weights
// and the KV cache are BF16, GEMM inputs are rounded to BF16, every accumulation and the
// residual stream are F32. The KV cache layout is the one in kernels/cuda/ops.h.
//
// Every public call runs on the backend's own stream and waits for it before returning, so a
// Sequence is never touched by two calls at once and pinned staging buffers can be reused.
// Not thread-safe (one caller at a time), like CpuBackend.
#include "common/runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/runtime/cuda/backend_access.h"
#include "common/runtime/cuda/decode_graph_cache.h"
#include "common/runtime/cuda/device_weights.h"
#include "common/runtime/cuda/kernel_choices.h"
#include "common/runtime/cuda/layer_pass.h"
#include "common/runtime/cuda/op_profiling.h"
#include "common/runtime/cuda/synthetic_backend.h"
#include "common/runtime/input_checks.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/op_profile.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/split_plan.h"

namespace scd {
namespace {

using cuda::Bf16;
using cuda::DeviceBuffer;

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
// offset of an array inside the upload; Device() turns it into a device pointer.
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
  static absl::StatusOr<std::unique_ptr<Backend>> Create(
      std::shared_ptr<const Model> model,
      const std::function<absl::StatusOr<std::unique_ptr<cuda::DeviceWeights>>(cuda::StreamHandle)>&
          make_weights) {
    std::unique_ptr<CudaBackend> b(new CudaBackend(std::move(model)));
    SCD_ASSIGN_OR_RETURN(b->device_, cuda::CurrentDevice());
    SCD_ASSIGN_OR_RETURN(b->stream_, cuda::Stream::Create());
    SCD_ASSIGN_OR_RETURN(b->gemm_, cuda::CublasGemm::Create(b->stream_->handle()));
    SCD_ASSIGN_OR_RETURN(b->weights_, make_weights(b->stream_->handle()));
    const std::vector<float> inv_freq = RopeInverseFrequencies(b->model_->config);
    SCD_ASSIGN_OR_RETURN(b->inv_freq_,
                         DeviceBuffer::Allocate(inv_freq.size() * sizeof(float), "inv_freq"));
    SCD_RETURN_IF_ERROR(cuda::CopyToDeviceSync(b->inv_freq_.data(), inv_freq.data(),
                                               inv_freq.size() * sizeof(float)));
    b->pass_ = std::make_unique<cuda::LayerPass>(b->model_->config, *b->weights_, *b->gemm_,
                                                 b->inv_freq_.as<float>(), b->clock_, b->stream());
    return std::unique_ptr<Backend>(std::move(b));
  }

  int device() const { return device_; }

  std::string_view name() const override { return "cuda"; }
  std::string device_description() const override { return cuda::DeviceDescription(device_); }
  const Model& model() const override { return *model_; }
  size_t decode_bytes_streamed() const { return weights_->DecodeBytesStreamed(); }

  absl::Status SetDecodeGraphs(const cuda::DecodeGraphOptions& options) {
    return graphs_.Configure(options);
  }

  absl::Status SetKernelChoices(const cuda::KernelChoices& choices) {
    SCD_RETURN_IF_ERROR(cuda::CheckKernelChoices(model_->config, choices));
    SCD_RETURN_IF_ERROR(gemm_->set_small_batch_max_rows(choices.small_batch_max_rows));
    pass_->set_kernels(choices);
    graphs_.Clear();  // recorded with the old kernels
    return absl::OkStatus();
  }
  const cuda::KernelChoices& kernel_choices() const { return pass_->kernels(); }
  cuda::OpClock& op_clock() { return clock_; }

  std::string kernel_description() const override {
    return cuda::DescribeKernelChoices(model_->config, pass_->kernels());
  }

  DecodeGraphStats decode_graph_stats() const override { return graphs_.stats(); }

  absl::StatusOr<cuda::SequenceCache> CacheOf(Sequence& seq_base) const {
    SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(&seq_base));
    cuda::SequenceCache view;
    view.k = seq->k_.as<Bf16>();
    view.v = seq->v_.as<Bf16>();
    view.layer_stride = static_cast<int64_t>(seq->capacity_) * model_->config.kv_dim();
    view.length = seq->length_;
    view.capacity = seq->capacity_;
    return view;
  }

  absl::Status CommitPositions(Sequence& seq_base, int tokens) const {
    SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(&seq_base));
    if (tokens <= 0 || seq->length_ + tokens > seq->capacity_) {
      return absl::OutOfRangeError(absl::StrCat("cannot commit ", tokens, " positions at ",
                                                seq->length_, " (capacity ", seq->capacity_, ")"));
    }
    seq->length_ += tokens;
    seq->has_last_logits_ = false;  // as AppendKv: no logits for positions computed elsewhere
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence(int capacity) override {
    const ModelConfig& c = model_->config;
    if (capacity <= 0 || capacity > c.max_position_embeddings) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence capacity ", capacity,
                       " must be in [1, max_position_embeddings=", c.max_position_embeddings, "]"));
    }
    SCD_RETURN_IF_ERROR(cuda::SetDevice(device_));
    auto seq = std::make_unique<CudaSequence>();
    seq->owner_ = this;
    seq->capacity_ = capacity;
    SCD_ASSIGN_OR_RETURN(seq->k_, DeviceBuffer::Allocate(CacheBytes(capacity), "K cache"));
    SCD_ASSIGN_OR_RETURN(seq->v_, DeviceBuffer::Allocate(CacheBytes(capacity), "V cache"));
    SCD_ASSIGN_OR_RETURN(seq->last_logits_, DeviceBuffer::Allocate(LogitsBytes(), "last logits"));
    return std::unique_ptr<Sequence>(std::move(seq));
  }

  size_t SequenceBytes(int capacity) const override {
    return 2 * CacheBytes(std::max(capacity, 0)) + LogitsBytes();
  }

  absl::StatusOr<DeviceMemory> DeviceMemoryNow() const override {
    SCD_RETURN_IF_ERROR(cuda::SetDevice(device_));
    SCD_ASSIGN_OR_RETURN(const cuda::DeviceMemoryInfo info, cuda::MemoryInfo());
    return DeviceMemory{info.free_bytes, info.total_bytes};
  }

  absl::Status ReserveWorkspace(const WorkspaceShape& shape) override {
    if (shape.prefill_tokens < 0 || shape.decode_rows < 0 || shape.decode_length < 0 ||
        shape.append_tokens < 0) {
      return absl::InvalidArgumentError("a workspace shape's sizes must be >= 0");
    }
    const ModelConfig& c = model_->config;
    const size_t vocab = c.vocab_size;
    const int prefill = shape.prefill_tokens, decode = shape.decode_rows;
    SCD_RETURN_IF_ERROR(cuda::SetDevice(device_));
    // The activations of a step's rows, and a prefill's hooks.
    SCD_RETURN_IF_ERROR(pass_->Reserve(std::max(prefill, decode), /*hooks=*/false));
    if (prefill > 0 && shape.prefill_layer_states) {
      SCD_RETURN_IF_ERROR(pass_->Reserve(prefill, /*hooks=*/true));
    }
    // Logits on the device: a decode step's rows, a prefill's last row (all with surprisal).
    const size_t prefill_logit_rows = prefill == 0 ? 0 : shape.prefill_surprisal ? prefill : 1;
    SCD_RETURN_IF_ERROR(logits_.Reserve(
        sizeof(float) * std::max<size_t>(decode, prefill_logit_rows) * vocab, "logits"));
    SCD_RETURN_IF_ERROR(nll_.Reserve(sizeof(float) * prefill, "surprisal"));
    // Every batch up to decode_rows sequences, at every length bucket up to decode_length.
    size_t attention_ws = 0, sample_ws = 0;
    if (decode > 0) {
      const int last_bucket =
          cuda::split_plan::DecodeLengthBucket(std::max(shape.decode_length, 1));
      for (int b = 1; b <= decode; ++b) {
        for (int bucket = 256;; bucket *= 2) {
          const int length = std::min(bucket, last_bucket);
          attention_ws = std::max(attention_ws, DecodeWorkspaceBytes(b, length));
          if (length == last_bucket) break;
        }
        SCD_ASSIGN_OR_RETURN(const size_t sampling, SampleWorkspaceBytes(b));
        sample_ws = std::max(sample_ws, sampling);
      }
    }
    SCD_RETURN_IF_ERROR(decode_ws_.Reserve(attention_ws, "decode workspace"));
    SCD_RETURN_IF_ERROR(sample_ws_.Reserve(sample_ws, "sampling"));
    const size_t append = AppendStagingBytes(shape.append_tokens);
    SCD_RETURN_IF_ERROR(append_stage_.Reserve(append, "AppendKv staging"));
    // Results back: a decode step's rows (ids or logits), a prefill's last logits and
    // surprisal; AppendKv's uploads.
    const size_t prefill_back =
        prefill == 0 ? 0 : sizeof(float) * (vocab + (shape.prefill_surprisal ? prefill : 0));
    SCD_RETURN_IF_ERROR(pinned_.Reserve(
        std::max({sizeof(float) * static_cast<size_t>(decode) * vocab, prefill_back, append})));
    const size_t meta =
        MetaBytesBound(std::max({prefill, decode, shape.append_tokens}), std::max(decode, 1));
    SCD_RETURN_IF_ERROR(meta_pinned_.Reserve(meta));
    return meta_dev_.Reserve(meta, "step metadata");
  }

  WorkspaceBytes Workspace() const override {
    WorkspaceBytes w;
    w.device = pass_->DeviceBytes();
    for (const DeviceBuffer* buffer :
         {&meta_dev_, &logits_, &nll_, &decode_ws_, &append_stage_, &sample_ws_}) {
      w.device += buffer->size();
    }
    w.pinned_host = meta_pinned_.size() + pinned_.size();
    return w;
  }

  absl::Status Prefill(Sequence& seq_base, absl::Span<const int32_t> tokens,
                       const PrefillOptions& options, PrefillResult* result) override {
    SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(&seq_base));
    const ModelConfig& c = model_->config;
    const int t = static_cast<int>(tokens.size());
    if (t == 0) return absl::InvalidArgumentError("prefill needs at least one token");
    if (options.residual) {
      // Selective recompute (DroidSpeak baseline) runs on the CPU reference backend only.
      return absl::UnimplementedError("the cuda backend does not export residual states yet");
    }
    if (seq->length_ + t > seq->capacity_) {
      return absl::OutOfRangeError(absl::StrCat("prefill of ", t, " tokens at position ",
                                                seq->length_, " exceeds sequence capacity ",
                                                seq->capacity_));
    }
    SCD_RETURN_IF_ERROR(CheckTokenIds(model_->config, tokens));
    SCD_RETURN_IF_ERROR(cuda::SetDevice(device_));
    const int d = c.hidden_size, vocab = c.vocab_size;
    const bool all_rows = options.all_logits || options.surprisal;
    const int first = all_rows ? 0 : t - 1;
    const int rows_out = t - first;

    std::vector<int32_t> positions(t), row_seq(t, 0);
    for (int i = 0; i < t; ++i) positions[i] = seq->length_ + i;
    StepMeta meta;
    const size_t ids_at = meta.Add(tokens.data(), t);
    const size_t pos_at = meta.Add(positions.data(), t);
    const size_t row_seq_at = meta.Add(row_seq.data(), t);
    SCD_ASSIGN_OR_RETURN(cuda::KvCacheTable table, AddTable({seq}, &meta));
    SCD_RETURN_IF_ERROR(Upload(meta));
    table = Relocate(table);

    SCD_RETURN_IF_ERROR(pass_->Reserve(t, options.layer_states));
    SCD_RETURN_IF_ERROR(logits_.Reserve(sizeof(float) * rows_out * vocab, "logits"));
    SCD_RETURN_IF_ERROR(nll_.Reserve(sizeof(float) * t, "surprisal"));

    cuda::AttentionStep attention;
    attention.k0 = seq->k_.as<Bf16>();
    attention.v0 = seq->v_.as<Bf16>();
    attention.layer_stride = static_cast<int64_t>(seq->capacity_) * c.kv_dim();
    attention.start = seq->length_;
    SCD_RETURN_IF_ERROR(pass_->Forward(t, Dev<int32_t>(ids_at), Dev<int32_t>(pos_at),
                                       Dev<int32_t>(row_seq_at), table, attention,
                                       options.layer_states));

    const cuda::StreamHandle s = stream();
    float* logits = logits_.as<float>();
    SCD_RETURN_IF_ERROR(
        pass_->Logits(pass_->x() + static_cast<size_t>(first) * d, rows_out, logits));
    const int32_t* ids_dev = Dev<int32_t>(ids_at);
    if (options.surprisal) {
      if (seq->has_last_logits_) {
        SCD_RETURN_IF_ERROR(cuda::NegLogLikelihood(seq->last_logits_.as<float>(), ids_dev,
                                                   nll_.as<float>(), 1, vocab, s));
      } else {
        SCD_RETURN_IF_ERROR(cuda::FillF32(nll_.as<float>(), 1, 0.0f, s));
      }
      SCD_RETURN_IF_ERROR(
          cuda::NegLogLikelihood(logits, ids_dev + 1, nll_.as<float>() + 1, t - 1, vocab, s));
    }
    const float* last_row = logits + static_cast<size_t>(rows_out - 1) * vocab;
    SCD_RETURN_IF_ERROR(
        cuda::CopyOnDevice(seq->last_logits_.data(), last_row, sizeof(float) * vocab, s));

    // Results back to the host: logits (all rows or the last), surprisal, hooks.
    const int rows_back = options.all_logits ? rows_out : 1;
    const float* logits_back = options.all_logits ? logits : last_row;
    const size_t logits_bytes = sizeof(float) * rows_back * vocab;
    const size_t nll_bytes = options.surprisal ? sizeof(float) * t : 0;
    SCD_RETURN_IF_ERROR(pinned_.Reserve(logits_bytes + nll_bytes));
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(pinned_.data(), logits_back, logits_bytes, s));
    SCD_RETURN_IF_ERROR(
        cuda::CopyToHost(pinned_.as<unsigned char>() + logits_bytes, nll_.data(), nll_bytes, s));
    std::vector<float> hooks;
    if (options.layer_states) {
      hooks.resize(static_cast<size_t>(c.num_layers) * t * pass_->HookWidth());
      SCD_RETURN_IF_ERROR(
          cuda::CopyToHost(hooks.data(), pass_->hooks().data(), hooks.size() * sizeof(float), s));
    }
    SCD_RETURN_IF_ERROR(stream_->Synchronize());

    result->num_tokens = t;
    const float* back = pinned_.as<float>();
    result->logits.assign(back, back + static_cast<size_t>(rows_back) * vocab);
    result->surprisal.clear();
    if (options.surprisal) {
      const float* nll = back + static_cast<size_t>(rows_back) * vocab;
      result->surprisal.assign(nll, nll + t);
    }
    result->layers.clear();
    if (options.layer_states) pass_->UnpackHooks(hooks, t, &result->layers);
    seq->length_ += t;
    seq->has_last_logits_ = true;
    return absl::OkStatus();
  }

  absl::Status AppendKv(Sequence& seq_base, const ExternalKv& kv) override {
    SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(&seq_base));
    const ModelConfig& c = model_->config;
    const int t = kv.num_tokens;
    const size_t want = static_cast<size_t>(t) * c.kv_dim();
    SCD_RETURN_IF_ERROR(CheckExternalKv(c, kv));
    if (seq->length_ + t > seq->capacity_) {
      return absl::OutOfRangeError(absl::StrCat("external KV of ", t, " tokens at position ",
                                                seq->length_, " exceeds sequence capacity ",
                                                seq->capacity_));
    }
    SCD_RETURN_IF_ERROR(cuda::SetDevice(device_));
    std::vector<int32_t> positions(t), row_seq(t, 0);
    for (int i = 0; i < t; ++i) positions[i] = seq->length_ + i;
    StepMeta meta;
    const size_t pos_at = meta.Add(positions.data(), t);
    const size_t row_seq_at = meta.Add(row_seq.data(), t);
    SCD_ASSIGN_OR_RETURN(cuda::KvCacheTable table, AddTable({seq}, &meta));
    SCD_RETURN_IF_ERROR(Upload(meta));
    table = Relocate(table);

    // Layers go up in batches that fit a bounded pinned buffer: K | V per layer, pre-RoPE.
    const size_t layer_bytes = 2 * want * sizeof(float);
    const int batch_layers = static_cast<int>(AppendStagingBytes(t) / layer_bytes);
    SCD_RETURN_IF_ERROR(pinned_.Reserve(layer_bytes * batch_layers));
    SCD_RETURN_IF_ERROR(append_stage_.Reserve(layer_bytes * batch_layers, "AppendKv staging"));
    const cuda::StreamHandle s = stream();
    for (int l0 = 0; l0 < c.num_layers; l0 += batch_layers) {
      const int n = std::min(batch_layers, c.num_layers - l0);
      for (int i = 0; i < n; ++i) {
        float* dst = pinned_.as<float>() + 2 * want * i;
        std::memcpy(dst, kv.k_pre_rope[l0 + i].data(), want * sizeof(float));
        std::memcpy(dst + want, kv.v[l0 + i].data(), want * sizeof(float));
      }
      SCD_RETURN_IF_ERROR(
          cuda::CopyToDevice(append_stage_.data(), pinned_.data(), layer_bytes * n, s));
      for (int i = 0; i < n; ++i) {
        const float* k_pre = append_stage_.as<float>() + 2 * want * i;
        SCD_RETURN_IF_ERROR(cuda::RopeStoreKv(
            k_pre, k_pre + want, c.kv_dim(), t, Dev<int32_t>(row_seq_at), Dev<int32_t>(pos_at),
            table, l0 + i, c.num_kv_heads, c.head_dim, inv_freq_.as<float>(), s));
      }
      SCD_RETURN_IF_ERROR(stream_->Synchronize());  // the pinned buffer is reused next batch
    }
    seq->length_ += t;
    seq->has_last_logits_ = false;  // no logits exist for positions computed elsewhere
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                      std::vector<float>* logits) override {
    SCD_RETURN_IF_ERROR(CheckDecodeBatch(seqs, tokens));
    return DecodeStep(seqs, tokens, {}, logits, nullptr, ExternalRows{}, nullptr);
  }

  // Samples on the device (cuda::SampleRows): only the token ids come back.
  absl::Status DecodeSample(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                            absl::Span<const SampleDraw> draws,
                            std::vector<int32_t>* next) override {
    SCD_RETURN_IF_ERROR(CheckDecodeBatch(seqs, tokens));
    return DecodeMixed(seqs, tokens, draws, next, ExternalRows{}, nullptr);
  }

  // The sequences' rows sampled on the device as DecodeSample's, the external rows' logits
  // copied back; one wait for both.
  absl::Status DecodeMixed(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                           absl::Span<const SampleDraw> draws, std::vector<int32_t>* next,
                           const ExternalRows& external,
                           std::vector<std::vector<float>>* external_logits) override {
    if (draws.size() != seqs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("decode batch has ", seqs.size(),
                                                     " sequences and ", draws.size(), " draws"));
    }
    return DecodeStep(seqs, tokens, draws, nullptr, next, external, external_logits);
  }

  // One decode step of `seqs` and, after their rows, `external`'s. The sequences' rows: with
  // `next`, sampled on the device with `draws` into *next, else their logits into *logits.
  // External rows' logits go to *external_logits. A step of the sequences alone is recorded
  // and replayed as a CUDA graph (graphs_); one with external rows runs eagerly, as
  // their attention waits on the host.
  absl::Status DecodeStep(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                          absl::Span<const SampleDraw> draws, std::vector<float>* logits,
                          std::vector<int32_t>* next, const ExternalRows& external,
                          std::vector<std::vector<float>>* external_logits) {
    const ModelConfig& c = model_->config;
    const int b = static_cast<int>(seqs.size());
    const int e = static_cast<int>(external.size());
    SCD_RETURN_IF_ERROR(CheckDecodeRows(c, seqs, tokens, external));
    std::unordered_set<Sequence*> seen;
    std::vector<CudaSequence*> batch;
    std::vector<int32_t> ids(tokens.begin(), tokens.end()), positions(b), row_seq(b), lengths(b);
    std::vector<float*> logits_dst(b);
    int max_length = 0;
    for (int i = 0; i < b; ++i) {
      if (seqs[i] == nullptr || !seen.insert(seqs[i]).second) {
        return absl::InvalidArgumentError("decode batch holds a null or repeated sequence");
      }
      SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(seqs[i]));
      if (seq->length_ >= seq->capacity_) {
        return absl::OutOfRangeError(
            absl::StrCat("sequence ", i, " is full (capacity ", seq->capacity_, ")"));
      }
      batch.push_back(seq);
      positions[i] = seq->length_;
      row_seq[i] = i;
      lengths[i] = seq->length_ + 1;
      logits_dst[i] = seq->last_logits_.as<float>();
      max_length = std::max(max_length, lengths[i]);
    }
    ids.insert(ids.end(), external.tokens.begin(), external.tokens.end());
    positions.insert(positions.end(), external.positions.begin(), external.positions.end());
    if (external_logits != nullptr) external_logits->resize(e);
    const int rows = b + e;
    if (rows == 0) {
      if (next != nullptr) next->clear();
      return absl::OkStatus();
    }
    SCD_RETURN_IF_ERROR(cuda::SetDevice(device_));
    const int vocab = c.vocab_size;
    StepMeta meta;
    const size_t ids_at = meta.Add(ids.data(), rows);
    const size_t pos_at = meta.Add(positions.data(), rows);
    const size_t row_seq_at = meta.Add(row_seq.data(), b);
    const size_t len_at = meta.Add(lengths.data(), b);
    const size_t dst_at = meta.Add(logits_dst.data(), b);
    // The table before the sampling parameters: Decode and DecodeSample then lay out (and can
    // replay) the same graphed part alike.
    SCD_ASSIGN_OR_RETURN(cuda::KvCacheTable table, AddTable(batch, &meta));
    const bool sample = next != nullptr && b > 0;
    size_t params_at = 0;
    if (sample) {
      std::vector<cuda::SampleParams> params(b);
      for (int i = 0; i < b; ++i) {
        params[i].temperature = draws[i].params.temperature;
        params[i].top_k = draws[i].params.top_k;
        params[i].top_p = draws[i].params.top_p;
        params[i].canonical = draws[i].canonical;
      }
      params_at = meta.Add(params.data(), b);
    }
    SCD_RETURN_IF_ERROR(Upload(meta));
    table = Relocate(table);

    SCD_RETURN_IF_ERROR(pass_->Reserve(rows, /*hooks=*/false));
    SCD_RETURN_IF_ERROR(logits_.Reserve(sizeof(float) * rows * vocab, "logits"));
    // Planned for the length bucket, graphed or not, so both run the same kernels alike.
    const int planned_length = cuda::split_plan::DecodeLengthBucket(std::max(max_length, 1));
    if (b > 0) {
      SCD_RETURN_IF_ERROR(
          decode_ws_.Reserve(DecodeWorkspaceBytes(b, planned_length), "decode workspace"));
    }

    cuda::AttentionStep attention;
    attention.decode = true;
    attention.lengths = Dev<int32_t>(len_at);
    attention.max_length = planned_length;
    attention.workspace = decode_ws_.as<float>();
    attention.workspace_floats = static_cast<int64_t>(decode_ws_.size() / sizeof(float));
    attention.external = external.attention;
    const cuda::StreamHandle s = stream();
    // Everything up to the logits (the sequences' in their buffers): what a graph records. It
    // reads the step's ids, positions, lengths and table from the metadata uploaded above.
    auto forward = [&]() -> absl::Status {
      SCD_RETURN_IF_ERROR(pass_->Forward(rows, Dev<int32_t>(ids_at), Dev<int32_t>(pos_at),
                                         Dev<int32_t>(row_seq_at), table, attention, false));
      SCD_RETURN_IF_ERROR(pass_->Logits(pass_->x(), rows, logits_.as<float>()));
      if (b == 0) return absl::OkStatus();
      return cuda::ScatterRows(logits_.as<float>(), vocab, Dev<float* const>(dst_at), b, vocab, s);
    };
    if (e > 0 || clock_.on()) {  // a profiled step runs eagerly, an op at a time
      if (b > 0) graphs_.CountEager();
      SCD_RETURN_IF_ERROR(forward());
    } else {
      // A graph replays the pointers and sizes it recorded: the key holds every one of them.
      const std::vector<uintptr_t> key = {static_cast<uintptr_t>(b),
                                          static_cast<uintptr_t>(planned_length),
                                          ids_at,
                                          pos_at,
                                          row_seq_at,
                                          len_at,
                                          dst_at,
                                          reinterpret_cast<uintptr_t>(table.k),
                                          reinterpret_cast<uintptr_t>(table.v),
                                          reinterpret_cast<uintptr_t>(table.layer_stride)};
      SCD_RETURN_IF_ERROR(graphs_.Run(b, GraphBuffers(), key, s, forward));
    }
    // What comes back, in one pinned buffer and after one wait: the sequences' sampled ids or
    // logits, then the external rows' logits.
    const size_t external_floats = static_cast<size_t>(e) * vocab;
    const size_t plain_bytes =
        sample ? sizeof(int32_t) * b : (next != nullptr ? 0 : sizeof(float) * b * vocab);
    SCD_RETURN_IF_ERROR(pinned_.Reserve(plain_bytes + sizeof(float) * external_floats));
    if (sample) {
      SCD_ASSIGN_OR_RETURN(const size_t sample_bytes, SampleWorkspaceBytes(b));
      const size_t ws_bytes = sample_bytes - sizeof(int32_t) * b;  // then the sampled ids
      SCD_RETURN_IF_ERROR(sample_ws_.Reserve(sample_bytes, "sampling"));
      int32_t* sampled = reinterpret_cast<int32_t*>(sample_ws_.as<unsigned char>() + ws_bytes);
      SCD_RETURN_IF_ERROR(cuda::SampleRows(logits_.as<float>(), Dev<cuda::SampleParams>(params_at),
                                           b, vocab, sampled, sample_ws_.data(), ws_bytes, s));
      SCD_RETURN_IF_ERROR(cuda::CopyToHost(pinned_.data(), sampled, plain_bytes, s));
    } else if (plain_bytes > 0) {
      SCD_RETURN_IF_ERROR(cuda::CopyToHost(pinned_.data(), logits_.data(), plain_bytes, s));
    }
    float* external_host = reinterpret_cast<float*>(pinned_.as<unsigned char>() + plain_bytes);
    if (e > 0) {
      SCD_RETURN_IF_ERROR(cuda::CopyToHost(external_host,
                                           logits_.as<float>() + static_cast<size_t>(b) * vocab,
                                           sizeof(float) * external_floats, s));
    }
    SCD_RETURN_IF_ERROR(stream_->Synchronize());
    if (sample) {
      next->assign(pinned_.as<int32_t>(), pinned_.as<int32_t>() + b);
    } else if (next != nullptr) {
      next->clear();
    } else {
      logits->assign(pinned_.as<float>(), pinned_.as<float>() + static_cast<size_t>(b) * vocab);
    }
    for (int i = 0; i < e; ++i) {
      const float* row = external_host + static_cast<size_t>(i) * vocab;
      (*external_logits)[i].assign(row, row + vocab);
    }
    for (CudaSequence* seq : batch) {
      seq->length_ += 1;
      seq->has_last_logits_ = true;
    }
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kAppendStagingBytes = size_t{256} << 20;

  explicit CudaBackend(std::shared_ptr<const Model> model) : model_(std::move(model)) {}

  cuda::StreamHandle stream() const { return stream_->handle(); }

  // A sequence's K (or V) cache of `capacity` positions, BF16; and its last logits.
  size_t CacheBytes(int capacity) const {
    const ModelConfig& c = model_->config;
    return static_cast<size_t>(c.num_layers) * capacity * c.kv_dim() * sizeof(Bf16);
  }
  size_t LogitsBytes() const { return sizeof(float) * model_->config.vocab_size; }

  // Decode attention's workspace for `batch` sequences at a planned length, grown to a power
  // of two: a buffer that moves strands every graph recorded over it.
  size_t DecodeWorkspaceBytes(int batch, int planned_length) const {
    const ModelConfig& c = model_->config;
    const int64_t floats = cuda::DecodeAttentionWorkspaceFloats(batch, planned_length, c.num_heads,
                                                                c.num_kv_heads, c.head_dim);
    size_t bytes = 4096;
    while (bytes < sizeof(float) * static_cast<size_t>(floats)) bytes *= 2;
    return bytes;
  }
  // SampleRows' workspace for `batch` rows, then the sampled ids.
  absl::StatusOr<size_t> SampleWorkspaceBytes(int batch) const {
    SCD_ASSIGN_OR_RETURN(const size_t ws_bytes,
                         cuda::SampleRowsWorkspaceBytes(batch, model_->config.vocab_size));
    return ws_bytes + sizeof(int32_t) * batch;
  }
  // AppendKv's staging for `tokens` positions: as many layers' pre-RoPE K | V as fit
  // kAppendStagingBytes (one at least), at most every layer.
  size_t AppendStagingBytes(int tokens) const {
    const ModelConfig& c = model_->config;
    if (tokens <= 0) return 0;
    const size_t layer_bytes = 2 * static_cast<size_t>(tokens) * c.kv_dim() * sizeof(float);
    const size_t per_batch = std::max<size_t>(1, kAppendStagingBytes / layer_bytes);
    return layer_bytes * std::min<size_t>(per_batch, c.num_layers);
  }
  // The most a step's metadata (StepMeta) takes for `rows` rows of `seqs` sequences: ids,
  // positions and each row's sequence per row; lengths, logits destinations, the cache table
  // (K, V, stride) and sampling parameters per sequence; each of the 9 arrays 16-byte aligned.
  static size_t MetaBytesBound(size_t rows, size_t seqs) {
    return 9 * 16 + rows * 3 * sizeof(int32_t) +
           seqs * (sizeof(int32_t) + sizeof(float*) + 2 * sizeof(Bf16*) + sizeof(int64_t) +
                   sizeof(cuda::SampleParams));
  }

  // The buffers every decode graph records, with their sizes: activations, logits, the
  // attention workspace and the step metadata (DecodeGraphCache drops its graphs when one
  // moves).
  std::vector<uintptr_t> GraphBuffers() const {
    std::vector<uintptr_t> a;
    pass_->AppendGraphBuffers(&a);
    for (const DeviceBuffer* buffer : {&logits_, &decode_ws_, &meta_dev_}) {
      a.push_back(reinterpret_cast<uintptr_t>(buffer->data()));
      a.push_back(buffer->size());
    }
    return a;
  }

  absl::StatusOr<CudaSequence*> Own(Sequence* seq) const {
    auto* cuda_seq = dynamic_cast<CudaSequence*>(seq);
    if (cuda_seq == nullptr || cuda_seq->owner_ != this) {
      return absl::InvalidArgumentError("sequence was not created by this CUDA backend");
    }
    return cuda_seq;
  }

  // Adds the cache table of `seqs` to `meta`; the pointers it returns are offsets into the
  // upload until Relocate() turns them into device addresses.
  absl::StatusOr<cuda::KvCacheTable> AddTable(const std::vector<CudaSequence*>& seqs,
                                              StepMeta* meta) const {
    std::vector<Bf16*> k(seqs.size()), v(seqs.size());
    std::vector<int64_t> stride(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      k[i] = seqs[i]->k_.as<Bf16>();
      v[i] = seqs[i]->v_.as<Bf16>();
      stride[i] = static_cast<int64_t>(seqs[i]->capacity_) * model_->config.kv_dim();
    }
    cuda::KvCacheTable table;
    table.k = reinterpret_cast<Bf16* const*>(meta->Add(k.data(), k.size()));
    table.v = reinterpret_cast<Bf16* const*>(meta->Add(v.data(), v.size()));
    table.layer_stride = reinterpret_cast<const int64_t*>(meta->Add(stride.data(), stride.size()));
    return table;
  }

  cuda::KvCacheTable Relocate(cuda::KvCacheTable table) const {
    table.k = Dev<Bf16* const>(reinterpret_cast<size_t>(table.k));
    table.v = Dev<Bf16* const>(reinterpret_cast<size_t>(table.v));
    table.layer_stride = Dev<const int64_t>(reinterpret_cast<size_t>(table.layer_stride));
    return table;
  }

  template <typename T>
  T* Dev(size_t offset) const {
    return reinterpret_cast<T*>(meta_dev_.as<unsigned char>() + offset);
  }

  absl::Status Upload(const StepMeta& meta) {
    const size_t bytes = meta.bytes().size();
    SCD_RETURN_IF_ERROR(meta_pinned_.Reserve(bytes));
    SCD_RETURN_IF_ERROR(meta_dev_.Reserve(bytes, "step metadata"));
    std::memcpy(meta_pinned_.data(), meta.bytes().data(), bytes);
    return cuda::CopyToDevice(meta_dev_.data(), meta_pinned_.data(), bytes, stream());
  }

  std::shared_ptr<const Model> model_;
  int device_ = 0;
  std::unique_ptr<cuda::Stream> stream_;
  std::unique_ptr<cuda::CublasGemm> gemm_;
  std::unique_ptr<cuda::DeviceWeights> weights_;
  DeviceBuffer inv_freq_;
  // Step metadata (ids, positions, cache table) and activations, grown on demand.
  cuda::PinnedBuffer meta_pinned_;
  DeviceBuffer meta_dev_;
  std::unique_ptr<cuda::LayerPass> pass_;
  DeviceBuffer logits_, nll_, decode_ws_, append_stage_;
  DeviceBuffer sample_ws_;     // SampleRows workspace, then the sampled ids
  cuda::PinnedBuffer pinned_;  // results back to the host, AppendKv uploads
  cuda::OpClock clock_;  // SetOpProfiling
  cuda::DecodeGraphCache graphs_;
};

absl::Status CheckConfig(const ModelConfig& c) {
  if (c.num_layers <= 0 || c.hidden_size <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.num_heads % c.num_kv_heads != 0 || c.head_dim <= 0 || c.head_dim % 2 != 0 ||
      c.head_dim > 256 || c.group_size() * c.head_dim > 4096 || c.vocab_size <= 0 ||
      c.intermediate_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA backend cannot run this config (heads ", c.num_heads, "/", c.num_kv_heads,
        ", head_dim ", c.head_dim,
        "; needs an even head_dim <= 256, grouped heads and group * head_dim <= 4096)"));
  }
  return absl::OkStatus();
}

absl::Status NotCuda(const Backend& backend) {
  return absl::InvalidArgumentError(
      absl::StrCat("backend '", std::string(backend.name()), "' is not CUDA"));
}

}  // namespace

int CudaDeviceCount() { return cuda::DeviceCount(); }

absl::Status CudaDeviceStatus() { return cuda::DeviceStatus(); }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                           const BackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateCudaBackend: null model");
  if (static_cast<int>(model->weights.layers.size()) != model->config.num_layers) {
    return absl::InvalidArgumentError("model weights do not match its config (layer count)");
  }
  SCD_RETURN_IF_ERROR(CheckConfig(model->config));
  SCD_RETURN_IF_ERROR(CudaDeviceStatus());
  const Model* host = model.get();
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                       CudaBackend::Create(std::move(model), [host](cuda::StreamHandle) {
                         return cuda::DeviceWeights::Upload(*host);
                       }));
  cuda::DecodeGraphOptions graphs;
  graphs.enabled = options.cuda_graphs;
  graphs.max_batch = options.cuda_graph_max_batch;
  SCD_RETURN_IF_ERROR(cuda::SetDecodeGraphs(*backend, graphs));
  SCD_ASSIGN_OR_RETURN(const cuda::KernelChoices kernels,
                       cuda::KernelChoicesFrom(options.cuda_kernels));
  SCD_RETURN_IF_ERROR(cuda::SetKernelChoices(*backend, kernels));
  return backend;
}

namespace cuda {

absl::StatusOr<std::unique_ptr<Backend>> CreateSyntheticCudaBackend(const ModelConfig& config,
                                                                    uint64_t seed, float init_std) {
  SCD_RETURN_IF_ERROR(CheckConfig(config));
  SCD_RETURN_IF_ERROR(CudaDeviceStatus());
  auto model = std::make_shared<Model>();
  model->config = config;
  return CudaBackend::Create(std::move(model), [&](StreamHandle stream) {
    return DeviceWeights::Random(config, seed, init_std, stream);
  });
}

bool IsCudaBackend(const Backend& backend) {
  return dynamic_cast<const CudaBackend*>(&backend) != nullptr;
}

absl::StatusOr<SequenceCache> CudaSequenceCache(Backend& backend, Sequence& seq) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  return cuda_backend->CacheOf(seq);
}

absl::StatusOr<int> CudaBackendDevice(const Backend& backend) {
  const auto* cuda_backend = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  return cuda_backend->device();
}

absl::Status CudaCommitPositions(Backend& backend, Sequence& seq, int tokens) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  return cuda_backend->CommitPositions(seq, tokens);
}

absl::Status SetDecodeGraphs(Backend& backend, const DecodeGraphOptions& options) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  return cuda_backend->SetDecodeGraphs(options);
}

absl::Status SetKernelChoices(Backend& backend, const KernelChoices& choices) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  return cuda_backend->SetKernelChoices(choices);
}

absl::StatusOr<KernelChoices> KernelChoicesOf(const Backend& backend) {
  const auto* cuda_backend = dynamic_cast<const CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  return cuda_backend->kernel_choices();
}

absl::Status SetOpProfiling(Backend& backend, bool on) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  cuda_backend->op_clock().Enable(on);
  return absl::OkStatus();
}

absl::StatusOr<OpProfile> TakeOpProfile(Backend& backend) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  return cuda_backend->op_clock().Take();
}

absl::StatusOr<OpClock*> OpClockOf(Backend& backend) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) return NotCuda(backend);
  return &cuda_backend->op_clock();
}

size_t CudaDecodeBytesStreamed(const Backend& backend) {
  const auto* cuda_backend = dynamic_cast<const CudaBackend*>(&backend);
  return cuda_backend == nullptr ? 0 : cuda_backend->decode_bytes_streamed();
}

}  // namespace cuda
}  // namespace scd
