// GpuRebuild: ConsumerCodec's rebuild of scd and scd-reuse payloads on a CUDA backend.
// The payload's codes go to the GPU as they are; the REUSE decoders, the PATCH
// aligners and the consumer's own [W_K; W_V] run there and write straight into the backend
// sequence's KV cache (kernels/cuda/scd_rebuilder.h), instead of decoding K/V on the host and
// uploading F32 K/V through AppendKv (about 100x the bytes of the codes).
//
// One device rebuilder holds the REUSE decoders of every layer and the PATCH aligners of the
// artifact's selected layers (ScdArtifact::PatchLayers), and serves every payload whose patched
// layers are among those: scd (the producer's default), scd-reuse (none) and any subset. It is
// taken at start for the engine's payload chunk (Reserve), else on first use, and grown when a
// longer payload arrives. A payload that patches another layer (a producer's ablation) gets a
// rebuilder of its own, on first use. Checks every block against the artifact as the host path
// does, so a payload that does not fit is refused the same way, without touching `seq`.
//
// CUDA-free header. In a build without CUDA, Applies() is false and Rebuild is UNIMPLEMENTED.
#ifndef SCD_COMMON_SCD_GPU_REBUILD_H_
#define SCD_COMMON_SCD_GPU_REBUILD_H_

#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/base/mutex.h"
#include "common/runtime/backend.h"
#include "common/scd/artifact.h"
#include "common/scd/codec.h"
#include "common/scd/wire_format.h"

namespace scd {

namespace cuda {
class ScdGpuRebuilder;
}

class GpuRebuild {
 public:
  GpuRebuild(std::shared_ptr<const Model> consumer, std::shared_ptr<const ScdArtifact> artifact);
  ~GpuRebuild();

  // True when this build has CUDA and `backend` is a CUDA backend (not a wrapper of one).
  static bool Applies(const Backend& backend);

  // Appends the positions of `p` (mode scd or scd-reuse, already checked against the pair and
  // the sequence's length by the caller) to `seq`. stats->decode_seconds gets the whole rebuild.
  absl::Status Rebuild(const Payload& p, Backend& backend, Sequence& seq, RebuildStats* stats);

  // Takes the rebuilder of the artifact's layout with room for payloads of `rows` tokens now,
  // so that serving allocates none of it. RESOURCE_EXHAUSTED when the device has no room.
  absl::Status Reserve(int rows);

  // Device bytes (weights and buffers) and pinned host bytes of every rebuilder held.
  WorkspaceBytes Bytes() const;

 private:
  // The rebuilder whose PATCH layers are `patch_layers` (REUSE on every layer), with room for
  // `rows` tokens: the held one, or a new one (the held one freed first).
  absl::StatusOr<cuda::ScdGpuRebuilder*> RebuilderFor(const std::vector<int>& patch_layers,
                                                      int rows, int room)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<const Model> consumer_;
  std::shared_ptr<const ScdArtifact> artifact_;
  std::vector<int> default_patches_;  // the artifact's selected layers, sorted
  mutable Mutex mu_;  // one rebuild at a time: the rebuilders' staging buffers are reused
  // By PATCH layers; shared_ptr: the type is complete only in CUDA builds.
  std::map<std::vector<int>, std::shared_ptr<cuda::ScdGpuRebuilder>> rebuilders_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace scd

#endif  // SCD_COMMON_SCD_GPU_REBUILD_H_
