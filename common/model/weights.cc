// LoadModel, the model digest and the size accounting of ModelWeights (see weights.h).
//
// Loading walks WeightLayout(config): every tensor the config implies must be present with
// exactly the implied shape (errors name the tensor, the file, and both shapes). Tensors the
// config does not use are ignored, except biases: a non-zero bias we would drop (o_proj,
// MLP, or q/k/v without qkv_bias) changes the function, so it is an error; all-zero ones,
// which some exporters write, are accepted. With tied embeddings lm_head.weight is ignored.
//
// An F32 tensor whose bytes are 4-byte aligned in the mapping becomes a view into it: no copy,
// and no page is read until something uses it (the mapping is not pre-faulted). SaveModel's
// files always qualify (their data region starts at a multiple of 64 bytes). F16/BF16 and
// misaligned F32 tensors are converted into owned buffers, in parallel over fixed
// 4M-element chunks.
//
// The digest is two-level SHA-256 (model_digest.h), hashed on all cores the first time it is
// read (Model::digest), not at load.
#include "common/model/weights.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/huge_pages.h"
#include "common/base/parallel_for.h"
#include "common/base/sha256.h"
#include "common/base/status_macros.h"
#include "common/model/checkpoint.h"
#include "common/model/model_digest.h"
#include "common/model/weight_layout.h"

namespace scd {
namespace {

constexpr size_t kConvertChunkElements = size_t{1} << 22;

// A contiguous range of one tensor's elements: one unit of parallel conversion.
struct Piece {
  DType dtype;
  const uint8_t* source;
  size_t count;
  float* out;
};

size_t TotalFloats(const ModelWeights& w, bool include_embed) {
  size_t n = include_embed ? w.embed.size() : 0;
  for (const LayerWeights& l : w.layers) {
    n += l.attn_norm.size() + l.wq.size() + l.wk.size() + l.wv.size() + l.wo.size() + l.bq.size() +
         l.bk.size() + l.bv.size() + l.ffn_norm.size() + l.w_gate.size() + l.w_up.size() +
         l.w_down.size();
  }
  return n + w.final_norm.size();
}

// Rejects tensors that would change the function but that this config has no slot for.
absl::Status CheckUnusedBiases(const SafetensorsCheckpoint& checkpoint,
                               const std::vector<WeightEntry>& layout) {
  std::vector<std::string> used;
  used.reserve(layout.size());
  for (const WeightEntry& entry : layout) used.push_back(entry.name);
  std::sort(used.begin(), used.end());
  for (const std::string& name : checkpoint.TensorNames()) {
    if (!absl::EndsWith(name, ".bias") || std::binary_search(used.begin(), used.end(), name)) {
      continue;
    }
    const SafetensorsFile* file = nullptr;
    const TensorInfo* info = checkpoint.Find(name, &file);
    SCD_ASSIGN_OR_RETURN(std::vector<float> values, file->ReadAsFloat(name));
    for (float v : values) {
      if (v != 0.0f) {
        return absl::UnimplementedError(absl::StrCat(
            file->path(), ": tensor '", name, "' ", ShapeString(info->shape),
            " is a non-zero bias this model has no slot for (only q/k/v biases are supported, "
            "and only when the config enables them)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t ModelWeights::DecodeBytesStreamed() const {
  return (TotalFloats(*this, /*include_embed=*/false) + output_matrix().size()) * sizeof(float);
}

size_t ModelWeights::ParameterCount() const {
  return TotalFloats(*this, /*include_embed=*/true) + lm_head.size();
}

// `value` is written before `known` is set (release) and never again, so a copy that sees
// `known` reads a finished value even while another thread is still inside digest().
Model::LazyDigest::LazyDigest(const LazyDigest& other) {
  if (other.known.load(std::memory_order_acquire)) {
    value = other.value;
    known.store(true, std::memory_order_release);
  }
}

const std::string& Model::digest() const {
  std::call_once(digest_.once, [this] {
    if (digest_.known.load(std::memory_order_acquire)) return;  // set_digest or a copy
    digest_.value = ComputeModelDigest(config, weights);
    digest_.known.store(true, std::memory_order_release);
  });
  return digest_.value;
}

void Model::set_digest(std::string digest) {
  digest_.value = std::move(digest);
  digest_.known.store(true, std::memory_order_release);
}

std::string ComputeModelDigest(const ModelConfig& config, const ModelWeights& weights) {
  std::vector<WeightEntry> layout = WeightLayout(config);
  layout.erase(std::remove_if(layout.begin(), layout.end(),
                              [&](const WeightEntry& e) {
                                return e.layer >= static_cast<int>(weights.layers.size());
                              }),
               layout.end());
  const std::vector<DigestChunk> chunks = DigestChunks(layout, weights);
  std::vector<Sha256::Digest> digests(chunks.size());
  ParallelFor(
      chunks.size(),
      [&](size_t i) {
        const DigestChunk& chunk = chunks[i];
        Sha256 hasher;
        hasher.Update(WeightData(weights, layout[chunk.tensor]).data() + chunk.first,
                      chunk.count * sizeof(float));
        digests[i] = hasher.Finish();
      },
      chunks.size() > layout.size() ? 0 : 1);  // one thread unless a tensor exceeds a chunk
  return CombineModelDigest(config, layout, weights, digests);
}

absl::StatusOr<std::shared_ptr<const Model>> LoadModel(const std::string& dir) {
  auto model = std::make_shared<Model>();
  model->dir = dir;
  SCD_ASSIGN_OR_RETURN(model->config, ModelConfig::FromDirectory(dir));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> checkpoint,
                       SafetensorsCheckpoint::Open(dir));
  const ModelConfig& config = model->config;
  ModelWeights& weights = model->weights;
  weights.layers.resize(static_cast<size_t>(config.num_layers));
  const std::vector<WeightEntry> layout = WeightLayout(config);
  std::vector<Piece> pieces;
  size_t total = 0;
  for (const WeightEntry& entry : layout) {
    const SafetensorsFile* file = nullptr;
    const TensorInfo* info = checkpoint->Find(entry.name, &file);
    if (info == nullptr) {
      std::string why;
      if (entry.field == WeightField::kLmHead) {
        why = " (tie_word_embeddings is false, so the checkpoint must have its own lm_head)";
      } else if (entry.field == WeightField::kBq || entry.field == WeightField::kBk ||
                 entry.field == WeightField::kBv) {
        why = absl::StrCat(" (", std::string(ArchitectureName(config.arch)),
                           " config implies q/k/v biases)");
      }
      return absl::NotFoundError(
          absl::StrCat(dir, ": tensor '", entry.name, "' not found in the checkpoint", why));
    }
    const absl::Status shape_ok = CheckTensorShape(*info, file->path(), entry.shape);
    if (!shape_ok.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(shape_ok.message(), " by config.json (", config.name, ")"));
    }
    SCD_RETURN_IF_ERROR(CheckReadable(*info, file->path()));
    WeightBuffer& data = WeightData(weights, entry);
    const size_t n = static_cast<size_t>(entry.NumElements());
    if (info->dtype == DType::kF32 &&
        reinterpret_cast<uintptr_t>(info->data) % alignof(float) == 0) {
      SCD_ASSIGN_OR_RETURN(data,
                           WeightBuffer::MapView(file->mapping(), file->OffsetInFile(*info), n));
      continue;
    }
    std::vector<float>& owned = data.MutableVector();
    ResizeWithHugePages(owned, n);
    const size_t element_size = DTypeSize(info->dtype);
    for (size_t offset = 0; offset < n; offset += kConvertChunkElements) {
      pieces.push_back({info->dtype, info->data + offset * element_size,
                        std::min(kConvertChunkElements, n - offset), owned.data() + offset});
    }
    total += n;
  }
  // Small models convert on the calling thread; thread start-up would dominate.
  ParallelFor(
      pieces.size(),
      [&](size_t i) {
        ConvertElementsToFloat(pieces[i].dtype, pieces[i].source, pieces[i].count, pieces[i].out);
      },
      total > 4 * kConvertChunkElements ? 0 : 1);
  SCD_RETURN_IF_ERROR(CheckUnusedBiases(*checkpoint, layout));
  return std::shared_ptr<const Model>(std::move(model));
}

}  // namespace scd
