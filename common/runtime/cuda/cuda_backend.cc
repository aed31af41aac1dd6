// CudaBackend: the Backend interface on one CUDA device, mirroring CpuBackend
// (common/runtime/cpu_backend.cc) step for step; only where tensors live and their precision
// differ. The layers of a step run in cuda::LayerPass (layer_pass.h), then surprisal (device
// NLL) and one copy of the logits back; decode steps (cuda_decode_step.cc) are recorded and
// replayed as CUDA graphs (cuda::DecodeGraphCache, decode_graph_cache.h). The class is
// cuda_backend_impl.h's; this file holds its set-up, sequences, workspaces, prefill and
// external KV, and the hooks of backend_access.h.
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

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/runtime/cuda/backend_access.h"
#include "common/runtime/cuda/cuda_backend_impl.h"
#include "common/runtime/cuda/op_profiling.h"
#include "common/runtime/cuda/synthetic_backend.h"
#include "common/runtime/input_checks.h"
#include "kernels/cuda/split_plan.h"

namespace scd {
namespace cuda {

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(std::shared_ptr<const Model> model,
                                                             const MakeWeights& make_weights) {
  std::unique_ptr<CudaBackend> b(new CudaBackend(std::move(model)));
  SCD_ASSIGN_OR_RETURN(b->device_, CurrentDevice());
  SCD_ASSIGN_OR_RETURN(b->stream_, Stream::Create());
  SCD_ASSIGN_OR_RETURN(b->gemm_, CublasGemm::Create(b->stream_->handle()));
  SCD_ASSIGN_OR_RETURN(b->weights_, make_weights(b->stream_->handle()));
  const std::vector<float> inv_freq = RopeInverseFrequencies(b->model_->config);
  SCD_ASSIGN_OR_RETURN(b->inv_freq_,
                       DeviceBuffer::Allocate(inv_freq.size() * sizeof(float), "inv_freq"));
  SCD_RETURN_IF_ERROR(
      CopyToDeviceSync(b->inv_freq_.data(), inv_freq.data(), inv_freq.size() * sizeof(float)));
  b->pass_ = std::make_unique<LayerPass>(b->model_->config, *b->weights_, *b->gemm_,
                                         b->inv_freq_.as<float>(), b->clock_, b->stream());
  return std::unique_ptr<Backend>(std::move(b));
}

absl::Status CudaBackend::SetKernelChoices(const KernelChoices& choices) {
  SCD_RETURN_IF_ERROR(CheckKernelChoices(model_->config, choices));
  SCD_RETURN_IF_ERROR(gemm_->set_small_batch_max_rows(choices.small_batch_max_rows));
  pass_->set_kernels(choices);
  graphs_.Clear();  // recorded with the old kernels
  return absl::OkStatus();
}

absl::StatusOr<SequenceCache> CudaBackend::CacheOf(Sequence& seq_base) const {
  SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(&seq_base));
  SequenceCache view;
  view.k = seq->k_.as<Bf16>();
  view.v = seq->v_.as<Bf16>();
  view.layer_stride = static_cast<int64_t>(seq->capacity_) * model_->config.kv_dim();
  view.length = seq->length_;
  view.capacity = seq->capacity_;
  return view;
}

absl::Status CudaBackend::CommitPositions(Sequence& seq_base, int tokens) const {
  SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(&seq_base));
  if (tokens <= 0 || seq->length_ + tokens > seq->capacity_) {
    return absl::OutOfRangeError(absl::StrCat("cannot commit ", tokens, " positions at ",
                                              seq->length_, " (capacity ", seq->capacity_, ")"));
  }
  seq->length_ += tokens;
  seq->has_last_logits_ = false;  // as AppendKv: no logits for positions computed elsewhere
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Sequence>> CudaBackend::NewSequence(int capacity) {
  const ModelConfig& c = model_->config;
  if (capacity <= 0 || capacity > c.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence capacity ", capacity,
                     " must be in [1, max_position_embeddings=", c.max_position_embeddings, "]"));
  }
  SCD_RETURN_IF_ERROR(SetDevice(device_));
  auto seq = std::make_unique<CudaSequence>();
  seq->owner_ = this;
  seq->capacity_ = capacity;
  SCD_ASSIGN_OR_RETURN(seq->k_, DeviceBuffer::Allocate(CacheBytes(capacity), "K cache"));
  SCD_ASSIGN_OR_RETURN(seq->v_, DeviceBuffer::Allocate(CacheBytes(capacity), "V cache"));
  SCD_ASSIGN_OR_RETURN(seq->last_logits_, DeviceBuffer::Allocate(LogitsBytes(), "last logits"));
  return std::unique_ptr<Sequence>(std::move(seq));
}

absl::StatusOr<DeviceMemory> CudaBackend::DeviceMemoryNow() const {
  SCD_RETURN_IF_ERROR(SetDevice(device_));
  SCD_ASSIGN_OR_RETURN(const DeviceMemoryInfo info, MemoryInfo());
  return DeviceMemory{info.free_bytes, info.total_bytes};
}

absl::Status CudaBackend::ReserveWorkspace(const WorkspaceShape& shape) {
  if (shape.prefill_tokens < 0 || shape.decode_rows < 0 || shape.decode_length < 0 ||
      shape.append_tokens < 0) {
    return absl::InvalidArgumentError("a workspace shape's sizes must be >= 0");
  }
  const ModelConfig& c = model_->config;
  const size_t vocab = c.vocab_size;
  const int prefill = shape.prefill_tokens, decode = shape.decode_rows;
  SCD_RETURN_IF_ERROR(SetDevice(device_));
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
  SCD_RETURN_IF_ERROR(ReserveDecodeWorkspaces(decode, shape.decode_length));
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

absl::Status CudaBackend::ReserveDecodeWorkspaces(int decode_rows, int decode_length) {
  size_t attention_ws = 0, sample_ws = 0;
  if (decode_rows > 0) {
    const int last_bucket = split_plan::DecodeLengthBucket(std::max(decode_length, 1));
    for (int b = 1; b <= decode_rows; ++b) {
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
  return sample_ws_.Reserve(sample_ws, "sampling");
}

WorkspaceBytes CudaBackend::Workspace() const {
  WorkspaceBytes w;
  w.device = pass_->DeviceBytes();
  for (const DeviceBuffer* buffer :
       {&meta_dev_, &logits_, &nll_, &decode_ws_, &append_stage_, &sample_ws_}) {
    w.device += buffer->size();
  }
  w.pinned_host = meta_pinned_.size() + pinned_.size();
  return w;
}

absl::Status CudaBackend::Prefill(Sequence& seq_base, absl::Span<const int32_t> tokens,
                                  const PrefillOptions& options, PrefillResult* result) {
  SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(&seq_base));
  SCD_RETURN_IF_ERROR(CheckPrefill(*seq, tokens, options));
  SCD_RETURN_IF_ERROR(SetDevice(device_));
  const int t = static_cast<int>(tokens.size());
  const int first = options.all_logits || options.surprisal ? 0 : t - 1;
  SCD_ASSIGN_OR_RETURN(const size_t ids_at, ForwardPrefill(*seq, tokens, options));
  SCD_RETURN_IF_ERROR(PrefillLogits(*seq, t, first, ids_at, options));
  SCD_RETURN_IF_ERROR(TakePrefillResults(t, first, options, result));
  seq->length_ += t;
  seq->has_last_logits_ = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::CheckPrefill(const CudaSequence& seq, absl::Span<const int32_t> tokens,
                                       const PrefillOptions& options) const {
  const int t = static_cast<int>(tokens.size());
  if (t == 0) return absl::InvalidArgumentError("prefill needs at least one token");
  if (options.residual) {
    // Selective recompute (DroidSpeak baseline) runs on the CPU reference backend only.
    return absl::UnimplementedError("the cuda backend does not export residual states yet");
  }
  if (seq.length_ + t > seq.capacity_) {
    return absl::OutOfRangeError(absl::StrCat("prefill of ", t, " tokens at position ", seq.length_,
                                              " exceeds sequence capacity ", seq.capacity_));
  }
  return CheckTokenIds(model_->config, tokens);
}

absl::StatusOr<size_t> CudaBackend::ForwardPrefill(CudaSequence& seq,
                                                   absl::Span<const int32_t> tokens,
                                                   const PrefillOptions& options) {
  const ModelConfig& c = model_->config;
  const int t = static_cast<int>(tokens.size());
  const int rows_out = options.all_logits || options.surprisal ? t : 1;
  std::vector<int32_t> positions(t), row_seq(t, 0);
  for (int i = 0; i < t; ++i) positions[i] = seq.length_ + i;
  StepMeta meta;
  const size_t ids_at = meta.Add(tokens.data(), t);
  const size_t pos_at = meta.Add(positions.data(), t);
  const size_t row_seq_at = meta.Add(row_seq.data(), t);
  SCD_ASSIGN_OR_RETURN(KvCacheTable table, AddTable({&seq}, &meta));
  SCD_RETURN_IF_ERROR(Upload(meta));
  table = Relocate(table);

  SCD_RETURN_IF_ERROR(pass_->Reserve(t, options.layer_states));
  SCD_RETURN_IF_ERROR(logits_.Reserve(sizeof(float) * rows_out * c.vocab_size, "logits"));
  SCD_RETURN_IF_ERROR(nll_.Reserve(sizeof(float) * t, "surprisal"));

  AttentionStep attention;
  attention.k0 = seq.k_.as<Bf16>();
  attention.v0 = seq.v_.as<Bf16>();
  attention.layer_stride = static_cast<int64_t>(seq.capacity_) * c.kv_dim();
  attention.start = seq.length_;
  SCD_RETURN_IF_ERROR(pass_->Forward(t, Dev<int32_t>(ids_at), Dev<int32_t>(pos_at),
                                     Dev<int32_t>(row_seq_at), table, attention,
                                     options.layer_states));
  return ids_at;
}

absl::Status CudaBackend::PrefillLogits(CudaSequence& seq, int t, int first, size_t ids_at,
                                        const PrefillOptions& options) {
  const int d = model_->config.hidden_size, vocab = model_->config.vocab_size;
  const int rows_out = t - first;
  const StreamHandle s = stream();
  float* logits = logits_.as<float>();
  SCD_RETURN_IF_ERROR(pass_->Logits(pass_->x() + static_cast<size_t>(first) * d, rows_out, logits));
  const int32_t* ids_dev = Dev<int32_t>(ids_at);
  if (options.surprisal) {
    if (seq.has_last_logits_) {
      SCD_RETURN_IF_ERROR(
          NegLogLikelihood(seq.last_logits_.as<float>(), ids_dev, nll_.as<float>(), 1, vocab, s));
    } else {
      SCD_RETURN_IF_ERROR(FillF32(nll_.as<float>(), 1, 0.0f, s));
    }
    SCD_RETURN_IF_ERROR(
        NegLogLikelihood(logits, ids_dev + 1, nll_.as<float>() + 1, t - 1, vocab, s));
  }
  const float* last_row = logits + static_cast<size_t>(rows_out - 1) * vocab;
  return CopyOnDevice(seq.last_logits_.data(), last_row, sizeof(float) * vocab, s);
}

absl::Status CudaBackend::TakePrefillResults(int t, int first, const PrefillOptions& options,
                                             PrefillResult* result) {
  const ModelConfig& c = model_->config;
  const int vocab = c.vocab_size;
  const int rows_out = t - first;
  const StreamHandle s = stream();
  const float* logits = logits_.as<float>();
  const float* last_row = logits + static_cast<size_t>(rows_out - 1) * vocab;
  // Results back to the host: logits (all rows or the last), surprisal, hooks.
  const int rows_back = options.all_logits ? rows_out : 1;
  const float* logits_back = options.all_logits ? logits : last_row;
  const size_t logits_bytes = sizeof(float) * rows_back * vocab;
  const size_t nll_bytes = options.surprisal ? sizeof(float) * t : 0;
  SCD_RETURN_IF_ERROR(pinned_.Reserve(logits_bytes + nll_bytes));
  SCD_RETURN_IF_ERROR(CopyToHost(pinned_.data(), logits_back, logits_bytes, s));
  SCD_RETURN_IF_ERROR(
      CopyToHost(pinned_.as<unsigned char>() + logits_bytes, nll_.data(), nll_bytes, s));
  std::vector<float> hooks;
  if (options.layer_states) {
    hooks.resize(static_cast<size_t>(c.num_layers) * t * pass_->HookWidth());
    SCD_RETURN_IF_ERROR(
        CopyToHost(hooks.data(), pass_->hooks().data(), hooks.size() * sizeof(float), s));
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
  return absl::OkStatus();
}

absl::Status CudaBackend::AppendKv(Sequence& seq_base, const ExternalKv& kv) {
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
  SCD_RETURN_IF_ERROR(SetDevice(device_));
  std::vector<int32_t> positions(t), row_seq(t, 0);
  for (int i = 0; i < t; ++i) positions[i] = seq->length_ + i;
  StepMeta meta;
  const size_t pos_at = meta.Add(positions.data(), t);
  const size_t row_seq_at = meta.Add(row_seq.data(), t);
  SCD_ASSIGN_OR_RETURN(KvCacheTable table, AddTable({seq}, &meta));
  SCD_RETURN_IF_ERROR(Upload(meta));
  table = Relocate(table);

  // Layers go up in batches that fit a bounded pinned buffer: K | V per layer, pre-RoPE.
  const size_t layer_bytes = 2 * want * sizeof(float);
  const int batch_layers = static_cast<int>(AppendStagingBytes(t) / layer_bytes);
  SCD_RETURN_IF_ERROR(pinned_.Reserve(layer_bytes * batch_layers));
  SCD_RETURN_IF_ERROR(append_stage_.Reserve(layer_bytes * batch_layers, "AppendKv staging"));
  const StreamHandle s = stream();
  for (int l0 = 0; l0 < c.num_layers; l0 += batch_layers) {
    const int n = std::min(batch_layers, c.num_layers - l0);
    for (int i = 0; i < n; ++i) {
      float* dst = pinned_.as<float>() + 2 * want * i;
      std::memcpy(dst, kv.k_pre_rope[l0 + i].data(), want * sizeof(float));
      std::memcpy(dst + want, kv.v[l0 + i].data(), want * sizeof(float));
    }
    SCD_RETURN_IF_ERROR(CopyToDevice(append_stage_.data(), pinned_.data(), layer_bytes * n, s));
    for (int i = 0; i < n; ++i) {
      const float* k_pre = append_stage_.as<float>() + 2 * want * i;
      SCD_RETURN_IF_ERROR(RopeStoreKv(k_pre, k_pre + want, c.kv_dim(), t, Dev<int32_t>(row_seq_at),
                                      Dev<int32_t>(pos_at), table, l0 + i, c.num_kv_heads,
                                      c.head_dim, inv_freq_.as<float>(), s));
    }
    SCD_RETURN_IF_ERROR(stream_->Synchronize());  // the pinned buffer is reused next batch
  }
  seq->length_ += t;
  seq->has_last_logits_ = false;  // no logits exist for positions computed elsewhere
  return absl::OkStatus();
}

size_t CudaBackend::DecodeWorkspaceBytes(int batch, int planned_length) const {
  const ModelConfig& c = model_->config;
  const int64_t floats = DecodeAttentionWorkspaceFloats(batch, planned_length, c.num_heads,
                                                        c.num_kv_heads, c.head_dim);
  size_t bytes = 4096;
  while (bytes < sizeof(float) * static_cast<size_t>(floats)) bytes *= 2;
  return bytes;
}

absl::StatusOr<size_t> CudaBackend::SampleWorkspaceBytes(int batch) const {
  SCD_ASSIGN_OR_RETURN(const size_t ws_bytes,
                       SampleRowsWorkspaceBytes(batch, model_->config.vocab_size));
  return ws_bytes + sizeof(int32_t) * batch;
}

size_t CudaBackend::AppendStagingBytes(int tokens) const {
  const ModelConfig& c = model_->config;
  if (tokens <= 0) return 0;
  const size_t layer_bytes = 2 * static_cast<size_t>(tokens) * c.kv_dim() * sizeof(float);
  const size_t per_batch = std::max<size_t>(1, kAppendStagingBytes / layer_bytes);
  return layer_bytes * std::min<size_t>(per_batch, c.num_layers);
}

std::vector<uintptr_t> CudaBackend::GraphBuffers() const {
  std::vector<uintptr_t> a;
  pass_->AppendGraphBuffers(&a);
  for (const DeviceBuffer* buffer : {&logits_, &decode_ws_, &meta_dev_}) {
    a.push_back(reinterpret_cast<uintptr_t>(buffer->data()));
    a.push_back(buffer->size());
  }
  return a;
}

absl::StatusOr<KvCacheTable> CudaBackend::AddTable(const std::vector<CudaSequence*>& seqs,
                                                   StepMeta* meta) const {
  std::vector<Bf16*> k(seqs.size()), v(seqs.size());
  std::vector<int64_t> stride(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    k[i] = seqs[i]->k_.as<Bf16>();
    v[i] = seqs[i]->v_.as<Bf16>();
    stride[i] = static_cast<int64_t>(seqs[i]->capacity_) * model_->config.kv_dim();
  }
  KvCacheTable table;
  table.k = reinterpret_cast<Bf16* const*>(meta->Add(k.data(), k.size()));
  table.v = reinterpret_cast<Bf16* const*>(meta->Add(v.data(), v.size()));
  table.layer_stride = reinterpret_cast<const int64_t*>(meta->Add(stride.data(), stride.size()));
  return table;
}

absl::Status CudaBackend::Upload(const StepMeta& meta) {
  const size_t bytes = meta.bytes().size();
  SCD_RETURN_IF_ERROR(meta_pinned_.Reserve(bytes));
  SCD_RETURN_IF_ERROR(meta_dev_.Reserve(bytes, "step metadata"));
  std::memcpy(meta_pinned_.data(), meta.bytes().data(), bytes);
  return CopyToDevice(meta_dev_.data(), meta_pinned_.data(), bytes, stream());
}

namespace {

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
}  // namespace cuda

int CudaDeviceCount() { return cuda::DeviceCount(); }

absl::Status CudaDeviceStatus() { return cuda::DeviceStatus(); }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                           const BackendOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateCudaBackend: null model");
  if (static_cast<int>(model->weights.layers.size()) != model->config.num_layers) {
    return absl::InvalidArgumentError("model weights do not match its config (layer count)");
  }
  SCD_RETURN_IF_ERROR(cuda::CheckConfig(model->config));
  SCD_RETURN_IF_ERROR(CudaDeviceStatus());
  const Model* host = model.get();
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                       cuda::CudaBackend::Create(std::move(model), [host](cuda::StreamHandle) {
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
