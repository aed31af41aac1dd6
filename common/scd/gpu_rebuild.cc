// See gpu_rebuild.h.
#include "common/scd/gpu_rebuild.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/model/config.h"
#include "common/scd/payload_checks.h"
#include "common/scd/quantize.h"

#if SCD_HAVE_CUDA
#include "common/runtime/cuda/backend_access.h"
#include "kernels/cuda/scd_rebuilder.h"
#endif

namespace scd {

GpuRebuild::GpuRebuild(std::shared_ptr<const Model> consumer,
                       std::shared_ptr<const ScdArtifact> artifact)
    : consumer_(std::move(consumer)), artifact_(std::move(artifact)) {
  default_patches_ = artifact_->PatchLayers();
  std::sort(default_patches_.begin(), default_patches_.end());
}

GpuRebuild::~GpuRebuild() = default;

#if !SCD_HAVE_CUDA

bool GpuRebuild::Applies(const Backend&) { return false; }

absl::Status GpuRebuild::Rebuild(const Payload&, Backend&, Sequence&, RebuildStats*) {
  return absl::UnimplementedError("this build has no CUDA: the GPU rebuild is not available");
}

absl::Status GpuRebuild::Reserve(int) {
  return absl::UnimplementedError("this build has no CUDA: the GPU rebuild is not available");
}

WorkspaceBytes GpuRebuild::Bytes() const { return {}; }

#else

namespace {

using Clock = std::chrono::steady_clock;

// The rebuild spec of a rebuilder: REUSE on every layer, PATCH on `patched` too.
cuda::RebuildSpec SpecFor(const std::vector<int>& patched, const ScdArtifact& artifact,
                          const Model& consumer) {
  const ModelConfig& c = consumer.config;
  cuda::RebuildSpec spec;
  spec.hidden_size = c.hidden_size;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.inv_freq = RopeInverseFrequencies(c);
  for (int l = 0; l < c.num_layers; ++l) {
    cuda::RebuildLayerSpec& layer = spec.layers.emplace_back();
    if (std::find(patched.begin(), patched.end(), l) != patched.end()) {
      const PatchAligner& f = artifact.patches.at(l).aligner;
      const LayerWeights& w = consumer.weights.layers[l];
      layer.code_dim = f.code_dim;
      layer.hidden_dim = f.hidden_dim;
      layer.a = f.a;
      layer.c_b2.resize(f.out_dim);
      for (int j = 0; j < f.out_dim; ++j) layer.c_b2[j] = f.c[j] + f.b2[j];
      layer.w1 = f.w1;
      layer.b1 = f.b1;
      layer.w2 = f.w2;
      layer.w_kv.assign(w.wk.begin(), w.wk.end());
      layer.w_kv.insert(layer.w_kv.end(), w.wv.begin(), w.wv.end());
      if (!w.bk.empty()) {
        layer.b_kv.assign(w.bk.begin(), w.bk.end());
        layer.b_kv.insert(layer.b_kv.end(), w.bv.begin(), w.bv.end());
      }
    }
    const ReuseLayer& r = artifact.reuse[l];
    layer.rank_k = r.key.rank;
    layer.rank_v = r.value.rank;
    layer.dec_k = r.key.decoder;
    layer.mu_k = r.key.mu_out;
    layer.dec_v = r.value.decoder;
    layer.mu_v = r.value.mu_out;
  }
  return spec;
}

// The host path's checks (payload_checks.h), plus the row count: the device reads the block's
// bytes as they are, without ToFloats' sizing.
absl::Status CheckBlock(const PayloadBlock* b, int rows, int cols, const char* what, int layer,
                        const std::string& mode) {
  if (absl::Status s = ExpectBlockCols(b, cols, what, layer, mode); !s.ok()) return s;
  if (static_cast<int>(b->rows) != rows) {
    return absl::InvalidArgumentError(absl::StrCat(mode, " payload's ", what, " block of layer ",
                                                   layer, " has ", b->rows, " rows, expected ",
                                                   rows));
  }
  return absl::OkStatus();
}

// The device decodes F32, F16 and int8-row blocks itself (its CodeFormat numbering is the
// wire's Encoding numbering for these three).
bool SentAsIs(const PayloadBlock& b) {
  return (b.encoding == Encoding::kF32 || b.encoding == Encoding::kF16 ||
          b.encoding == Encoding::kInt8Row) &&
         b.data.size() == EncodedBytes(b.encoding, b.rows, b.cols, b.group);
}

// The layer's codes for the device: the blocks' bytes as they arrived when the device can
// decode them (4x fewer bytes to stage and upload for int8), else host-decoded F32.
absl::Status LayerCodesFor(const PayloadBlock* k, const PayloadBlock* v, std::vector<float>* k_f32,
                           std::vector<float>* v_f32, cuda::LayerCodes* codes) {
  if (SentAsIs(*k) && (v == nullptr || (SentAsIs(*v) && v->encoding == k->encoding))) {
    codes->z_k = k->data.data();
    codes->z_v = v != nullptr ? v->data.data() : nullptr;
    codes->format = static_cast<cuda::CodeFormat>(k->encoding);
    return absl::OkStatus();
  }
  SCD_ASSIGN_OR_RETURN(*k_f32, k->ToFloats());
  if (v != nullptr) {
    SCD_ASSIGN_OR_RETURN(*v_f32, v->ToFloats());
  }
  codes->z_k = k_f32->data();
  codes->z_v = v != nullptr ? v_f32->data() : nullptr;
  codes->format = cuda::CodeFormat::kF32;
  return absl::OkStatus();
}

static_assert(static_cast<int>(cuda::CodeFormat::kF16) == static_cast<int>(Encoding::kF16) &&
              static_cast<int>(cuda::CodeFormat::kInt8Row) ==
                  static_cast<int>(Encoding::kInt8Row) &&
              static_cast<int>(cuda::CodeFormat::kF32) == static_cast<int>(Encoding::kF32));

}  // namespace

bool GpuRebuild::Applies(const Backend& backend) { return cuda::IsCudaBackend(backend); }

absl::Status GpuRebuild::Rebuild(const Payload& p, Backend& backend, Sequence& seq,
                                 RebuildStats* stats) {
  const auto t0 = Clock::now();
  const ModelConfig& c = consumer_->config;
  const int t = static_cast<int>(p.token_ids.size());
  const std::string mode(CodecModeName(p.mode));
  if (p.mode != CodecMode::kScd && p.mode != CodecMode::kScdReuse) {
    return absl::InvalidArgumentError(
        absl::StrCat("the GPU rebuild takes scd and scd-reuse payloads, not ", mode));
  }
  // Layout and block checks first, as the host path does: nothing is written on a bad payload.
  std::vector<int> patched;
  std::vector<std::vector<float> > z_k(c.num_layers), z_v(c.num_layers);
  std::vector<cuda::LayerCodes> codes(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    if (p.Find(BlockKind::kResidual, l) != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(mode, " payload has a residual block"));
    }
    if (const PayloadBlock* pb = p.Find(BlockKind::kPatch, l); pb != nullptr) {
      SCD_ASSIGN_OR_RETURN(const PatchAligner* aligner, PatchAlignerFor(p, pb, l, artifact_.get()));
      SCD_RETURN_IF_ERROR(CheckBlock(pb, t, aligner->code_dim, "patch", l, mode));
      SCD_RETURN_IF_ERROR(LayerCodesFor(pb, nullptr, &z_k[l], &z_v[l], &codes[l]));
      codes[l].part = cuda::RebuildPart::kPatch;
      patched.push_back(l);
    } else {
      const ReuseLayer& r = artifact_->reuse[l];
      const PayloadBlock* kb = p.Find(BlockKind::kKey, l);
      const PayloadBlock* vb = p.Find(BlockKind::kValue, l);
      SCD_RETURN_IF_ERROR(CheckBlock(kb, t, r.key.rank, "key code", l, mode));
      SCD_RETURN_IF_ERROR(CheckBlock(vb, t, r.value.rank, "value code", l, mode));
      SCD_RETURN_IF_ERROR(LayerCodesFor(kb, vb, &z_k[l], &z_v[l], &codes[l]));
    }
  }
  SCD_ASSIGN_OR_RETURN(const cuda::SequenceCache cache, cuda::CudaSequenceCache(backend, seq));
  if (cache.length + t > cache.capacity) {
    return absl::OutOfRangeError(absl::StrCat("payload of ", t, " tokens at position ",
                                              cache.length, " exceeds sequence capacity ",
                                              cache.capacity));
  }

  MutexLock lock(&mu_);
  // The artifact's rebuilder when it has every patched layer (they are sorted: layer order).
  const bool in_default = std::includes(default_patches_.begin(), default_patches_.end(),
                                        patched.begin(), patched.end());
  // Room for this payload, rounded up to a power of two so that growth is rare.
  int room = 256;
  while (room < t) room *= 2;
  SCD_ASSIGN_OR_RETURN(cuda::ScdGpuRebuilder* const rebuilder,
                       RebuilderFor(in_default ? default_patches_ : patched, t, room));
  SCD_RETURN_IF_ERROR(rebuilder->Rebuild(codes, t, cache));
  SCD_RETURN_IF_ERROR(cuda::CudaCommitPositions(backend, seq, t));
  if (stats != nullptr) {
    stats->decode_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return absl::OkStatus();
}

absl::StatusOr<cuda::ScdGpuRebuilder*> GpuRebuild::RebuilderFor(
    const std::vector<int>& patch_layers, int rows, int room) {
  std::shared_ptr<cuda::ScdGpuRebuilder>& rebuilder = rebuilders_[patch_layers];
  if (rebuilder == nullptr || rebuilder->max_tokens() < rows) {
    rebuilder.reset();  // frees the smaller one's device memory first
    SCD_ASSIGN_OR_RETURN(rebuilder, cuda::ScdGpuRebuilder::Create(
                                        SpecFor(patch_layers, *artifact_, *consumer_), room));
  }
  return rebuilder.get();
}

absl::Status GpuRebuild::Reserve(int rows) {
  if (rows <= 0) return absl::InvalidArgumentError("the GPU rebuild needs rows >= 1 to reserve");
  MutexLock lock(&mu_);
  return RebuilderFor(default_patches_, rows, rows).status();
}

WorkspaceBytes GpuRebuild::Bytes() const {
  MutexLock lock(&mu_);
  WorkspaceBytes bytes;
  for (const auto& [layers, rebuilder] : rebuilders_) {
    if (rebuilder == nullptr) continue;  // a failed Create
    bytes.device += rebuilder->device_bytes();
    bytes.pinned_host += rebuilder->pinned_bytes();
  }
  return bytes;
}

#endif  // SCD_HAVE_CUDA

}  // namespace scd
