// GpuRebuild: ConsumerCodec's rebuild of scd and scd-reuse payloads on a CUDA backend
// (issue 7). The payload's codes go to the GPU as they are; the REUSE decoders, the PATCH
// aligners and the consumer's own [W_K; W_V] run there and write straight into the backend
// sequence's KV cache (kernels/cuda/scd_rebuilder.h), instead of decoding K/V on the host and
// uploading F32 K/V through AppendKv (about 100x the bytes of the codes).
//
// One device rebuilder per set of patched layers (a payload's layout), created on first use
// and grown when a longer payload arrives. Checks every block against the artifact as the host
// path does, so a payload that does not fit is refused the same way, without touching `seq`.
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

 private:
  struct Entry {
    int max_tokens = 0;
    std::shared_ptr<cuda::ScdGpuRebuilder> rebuilder;  // shared: complete only in CUDA builds
  };
  std::shared_ptr<const Model> consumer_;
  std::shared_ptr<const ScdArtifact> artifact_;
  Mutex mu_;  // one rebuild at a time: the rebuilders' staging buffers are reused
  std::map<std::vector<int>, Entry> rebuilders_;  // by patched layers
};

}  // namespace scd

#endif  // SCD_COMMON_SCD_GPU_REBUILD_H_
