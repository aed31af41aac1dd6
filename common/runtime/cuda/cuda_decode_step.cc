// CudaBackend's batched decode step (the class is cuda_backend_impl.h's; cuda_backend.cc holds
// the rest of it). One step, as CpuBackend's: gather the rows on the host (the sequences', then
// any external rows', whose attention the caller supplies), upload their metadata in one copy,
// run the layers and the LM head, and bring back the sampled ids or the logits after one wait.
// A step of the sequences alone is recorded once per shape and replayed as a CUDA graph
// (DecodeGraphCache); graphed and eager steps run the same kernels on the same buffers, so they
// give identical results.
#include <algorithm>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/runtime/cuda/cuda_backend_impl.h"
#include "common/runtime/input_checks.h"
#include "kernels/cuda/split_plan.h"

namespace scd::cuda {

absl::Status CudaBackend::Decode(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                                 std::vector<float>* logits) {
  SCD_RETURN_IF_ERROR(CheckDecodeBatch(seqs, tokens));
  return DecodeStep(seqs, tokens, {}, logits, nullptr, ExternalRows{}, nullptr);
}

absl::Status CudaBackend::DecodeSample(absl::Span<Sequence* const> seqs,
                                       absl::Span<const int32_t> tokens,
                                       absl::Span<const SampleDraw> draws,
                                       std::vector<int32_t>* next) {
  SCD_RETURN_IF_ERROR(CheckDecodeBatch(seqs, tokens));
  return DecodeMixed(seqs, tokens, draws, next, ExternalRows{}, nullptr);
}

absl::Status CudaBackend::DecodeMixed(absl::Span<Sequence* const> seqs,
                                      absl::Span<const int32_t> tokens,
                                      absl::Span<const SampleDraw> draws,
                                      std::vector<int32_t>* next, const ExternalRows& external,
                                      std::vector<std::vector<float>>* external_logits) {
  if (draws.size() != seqs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode batch has ", seqs.size(), " sequences and ", draws.size(), " draws"));
  }
  return DecodeStep(seqs, tokens, draws, nullptr, next, external, external_logits);
}

absl::Status CudaBackend::DecodeStep(absl::Span<Sequence* const> seqs,
                                     absl::Span<const int32_t> tokens,
                                     absl::Span<const SampleDraw> draws, std::vector<float>* logits,
                                     std::vector<int32_t>* next, const ExternalRows& external,
                                     std::vector<std::vector<float>>* external_logits) {
  const int b = static_cast<int>(seqs.size());
  const int e = static_cast<int>(external.size());
  SCD_RETURN_IF_ERROR(CheckDecodeRows(model_->config, seqs, tokens, external));
  SCD_ASSIGN_OR_RETURN(const DecodeRows rows, GatherDecodeRows(seqs, tokens, external));
  if (external_logits != nullptr) external_logits->resize(e);
  if (b + e == 0) {
    if (next != nullptr) next->clear();
    return absl::OkStatus();
  }
  SCD_RETURN_IF_ERROR(SetDevice(device_));
  const bool sample = next != nullptr && b > 0;
  SCD_ASSIGN_OR_RETURN(const DecodeMeta meta, UploadDecodeMeta(rows, b, draws, sample));
  // Planned for the length bucket, graphed or not, so both run the same kernels alike.
  const int planned_length = split_plan::DecodeLengthBucket(std::max(rows.max_length, 1));
  SCD_RETURN_IF_ERROR(ForwardDecode(meta, b, e, planned_length, external));
  // What comes back, in one pinned buffer and after one wait: the sequences' sampled ids or
  // logits, then the external rows' logits.
  const size_t vocab = model_->config.vocab_size;
  const size_t plain_bytes =
      sample ? sizeof(int32_t) * b : (next != nullptr ? 0 : sizeof(float) * b * vocab);
  SCD_RETURN_IF_ERROR(CopyDecodeResults(meta, b, e, sample, plain_bytes));
  SCD_RETURN_IF_ERROR(stream_->Synchronize());
  TakeDecodeResults(b, e, sample, plain_bytes, logits, next, external_logits);
  for (CudaSequence* seq : rows.batch) {
    seq->length_ += 1;
    seq->has_last_logits_ = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<CudaBackend::DecodeRows> CudaBackend::GatherDecodeRows(
    absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
    const ExternalRows& external) const {
  const int b = static_cast<int>(seqs.size());
  std::unordered_set<Sequence*> seen;
  DecodeRows rows;
  rows.ids.assign(tokens.begin(), tokens.end());
  rows.positions.resize(b);
  rows.row_seq.resize(b);
  rows.lengths.resize(b);
  rows.logits_dst.resize(b);
  for (int i = 0; i < b; ++i) {
    if (seqs[i] == nullptr || !seen.insert(seqs[i]).second) {
      return absl::InvalidArgumentError("decode batch holds a null or repeated sequence");
    }
    SCD_ASSIGN_OR_RETURN(CudaSequence * seq, Own(seqs[i]));
    if (seq->length_ >= seq->capacity_) {
      return absl::OutOfRangeError(
          absl::StrCat("sequence ", i, " is full (capacity ", seq->capacity_, ")"));
    }
    rows.batch.push_back(seq);
    rows.positions[i] = seq->length_;
    rows.row_seq[i] = i;
    rows.lengths[i] = seq->length_ + 1;
    rows.logits_dst[i] = seq->last_logits_.as<float>();
    rows.max_length = std::max(rows.max_length, rows.lengths[i]);
  }
  rows.ids.insert(rows.ids.end(), external.tokens.begin(), external.tokens.end());
  rows.positions.insert(rows.positions.end(), external.positions.begin(), external.positions.end());
  return rows;
}

absl::StatusOr<CudaBackend::DecodeMeta> CudaBackend::UploadDecodeMeta(
    const DecodeRows& rows, int b, absl::Span<const SampleDraw> draws, bool sample) {
  const size_t n = rows.ids.size();
  StepMeta upload;
  DecodeMeta meta;
  meta.ids_at = upload.Add(rows.ids.data(), n);
  meta.pos_at = upload.Add(rows.positions.data(), n);
  meta.row_seq_at = upload.Add(rows.row_seq.data(), b);
  meta.len_at = upload.Add(rows.lengths.data(), b);
  meta.dst_at = upload.Add(rows.logits_dst.data(), b);
  // The table before the sampling parameters: Decode and DecodeSample then lay out (and can
  // replay) the same graphed part alike.
  SCD_ASSIGN_OR_RETURN(meta.table, AddTable(rows.batch, &upload));
  if (sample) {
    std::vector<SampleParams> params(b);
    for (int i = 0; i < b; ++i) {
      params[i].temperature = draws[i].params.temperature;
      params[i].top_k = draws[i].params.top_k;
      params[i].top_p = draws[i].params.top_p;
      params[i].canonical = draws[i].canonical;
    }
    meta.params_at = upload.Add(params.data(), b);
  }
  SCD_RETURN_IF_ERROR(Upload(upload));
  meta.table = Relocate(meta.table);
  return meta;
}

absl::Status CudaBackend::ForwardDecode(const DecodeMeta& meta, int b, int e, int planned_length,
                                        const ExternalRows& external) {
  const int rows = b + e;
  const int vocab = model_->config.vocab_size;
  SCD_RETURN_IF_ERROR(pass_->Reserve(rows, /*hooks=*/false));
  SCD_RETURN_IF_ERROR(logits_.Reserve(sizeof(float) * rows * vocab, "logits"));
  if (b > 0) {
    SCD_RETURN_IF_ERROR(
        decode_ws_.Reserve(DecodeWorkspaceBytes(b, planned_length), "decode workspace"));
  }

  AttentionStep attention;
  attention.decode = true;
  attention.lengths = Dev<int32_t>(meta.len_at);
  attention.max_length = planned_length;
  attention.workspace = decode_ws_.as<float>();
  attention.workspace_floats = static_cast<int64_t>(decode_ws_.size() / sizeof(float));
  attention.external = external.attention;
  const StreamHandle s = stream();
  // Everything up to the logits (the sequences' in their buffers): what a graph records. It
  // reads the step's ids, positions, lengths and table from the metadata uploaded before.
  auto forward = [&]() -> absl::Status {
    SCD_RETURN_IF_ERROR(pass_->Forward(rows, Dev<int32_t>(meta.ids_at), Dev<int32_t>(meta.pos_at),
                                       Dev<int32_t>(meta.row_seq_at), meta.table, attention,
                                       false));
    SCD_RETURN_IF_ERROR(pass_->Logits(pass_->x(), rows, logits_.as<float>()));
    if (b == 0) return absl::OkStatus();
    return ScatterRows(logits_.as<float>(), vocab, Dev<float* const>(meta.dst_at), b, vocab, s);
  };
  if (e > 0 || clock_.on()) {  // a profiled step runs eagerly, an op at a time
    if (b > 0) graphs_.CountEager();
    return forward();
  }
  // A graph replays the pointers and sizes it recorded: the key holds every one of them.
  const std::vector<uintptr_t> key = {static_cast<uintptr_t>(b),
                                      static_cast<uintptr_t>(planned_length),
                                      meta.ids_at,
                                      meta.pos_at,
                                      meta.row_seq_at,
                                      meta.len_at,
                                      meta.dst_at,
                                      reinterpret_cast<uintptr_t>(meta.table.k),
                                      reinterpret_cast<uintptr_t>(meta.table.v),
                                      reinterpret_cast<uintptr_t>(meta.table.layer_stride)};
  return graphs_.Run(b, GraphBuffers(), key, s, forward);
}

absl::Status CudaBackend::CopyDecodeResults(const DecodeMeta& meta, int b, int e, bool sample,
                                            size_t plain_bytes) {
  const int vocab = model_->config.vocab_size;
  const size_t external_floats = static_cast<size_t>(e) * vocab;
  const StreamHandle s = stream();
  SCD_RETURN_IF_ERROR(pinned_.Reserve(plain_bytes + sizeof(float) * external_floats));
  if (sample) {
    SCD_ASSIGN_OR_RETURN(const size_t sample_bytes, SampleWorkspaceBytes(b));
    const size_t ws_bytes = sample_bytes - sizeof(int32_t) * b;  // then the sampled ids
    SCD_RETURN_IF_ERROR(sample_ws_.Reserve(sample_bytes, "sampling"));
    int32_t* sampled = reinterpret_cast<int32_t*>(sample_ws_.as<unsigned char>() + ws_bytes);
    SCD_RETURN_IF_ERROR(SampleRows(logits_.as<float>(), Dev<SampleParams>(meta.params_at), b, vocab,
                                   sampled, sample_ws_.data(), ws_bytes, s));
    SCD_RETURN_IF_ERROR(CopyToHost(pinned_.data(), sampled, plain_bytes, s));
  } else if (plain_bytes > 0) {
    SCD_RETURN_IF_ERROR(CopyToHost(pinned_.data(), logits_.data(), plain_bytes, s));
  }
  if (e == 0) return absl::OkStatus();
  float* external_host = reinterpret_cast<float*>(pinned_.as<unsigned char>() + plain_bytes);
  return CopyToHost(external_host, logits_.as<float>() + static_cast<size_t>(b) * vocab,
                    sizeof(float) * external_floats, s);
}

void CudaBackend::TakeDecodeResults(int b, int e, bool sample, size_t plain_bytes,
                                    std::vector<float>* logits, std::vector<int32_t>* next,
                                    std::vector<std::vector<float>>* external_logits) const {
  const int vocab = model_->config.vocab_size;
  if (sample) {
    next->assign(pinned_.as<int32_t>(), pinned_.as<int32_t>() + b);
  } else if (next != nullptr) {
    next->clear();
  } else {
    logits->assign(pinned_.as<float>(), pinned_.as<float>() + static_cast<size_t>(b) * vocab);
  }
  const float* external_host =
      reinterpret_cast<const float*>(pinned_.as<unsigned char>() + plain_bytes);
  for (int i = 0; i < e; ++i) {
    const float* row = external_host + static_cast<size_t>(i) * vocab;
    (*external_logits)[i].assign(row, row + vocab);
  }
}

}  // namespace scd::cuda
