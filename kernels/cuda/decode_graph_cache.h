// DecodeGraphCache: the CUDA backend's decode steps recorded as CUDA graphs and replayed with
// one launch instead of a few hundred (DecodeGraphOptions, synthetic_backend.h). A graph
// replays the pointers and sizes it recorded, so each is kept under a key holding all of them:
// the buffers every step records (activations, logits, workspaces, metadata) with their sizes,
// then the step's own shape and metadata layout. When a buffer moves (it grew), no cached
// graph can be replayed again and all are dropped. At most max_graphs are held, the least
// recently used dropped first. CUDA-free header.
#ifndef SCD_KERNELS_CUDA_DECODE_GRAPH_CACHE_H_
#define SCD_KERNELS_CUDA_DECODE_GRAPH_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/synthetic_backend.h"

namespace scd::cuda {

class DecodeGraphCache {
 public:
  // Takes `options` (checked) and drops every cached graph; a capture failure's ban ends.
  absl::Status Configure(const DecodeGraphOptions& options);
  // Drops every cached graph (their kernels changed).
  void Clear() { graphs_.clear(); }

  // Runs `forward` (a decode step's work on `stream`) as a CUDA graph when graphs are on and
  // `batch` is at most max_batch: the graph recorded for `buffers` then `key` is replayed, or
  // recorded now. A recording that fails (CUDA refuses the capture) runs the step eagerly;
  // when that succeeds the fault was the capture's, so graphs stay off from then on
  // (DecodeGraphStats::capture_failures). Otherwise the step runs eagerly.
  absl::Status Run(int batch, const std::vector<uintptr_t>& buffers,
                   const std::vector<uintptr_t>& key, StreamHandle stream,
                   const std::function<absl::Status()>& forward);
  // A step the caller ran eagerly itself (a step graphs cannot record, or a profiled one).
  void CountEager() { ++stats_.eager_steps; }

  DecodeGraphStats stats() const;

 private:
  struct Cached {
    std::vector<uintptr_t> buffers;  // the buffers when recorded
    std::vector<uintptr_t> key;      // buffers, then the step's key
    std::unique_ptr<Graph> graph;
    uint64_t last_use = 0;
  };
  DecodeGraphOptions options_;
  std::vector<Cached> graphs_;
  uint64_t clock_ = 0;
  bool broken_ = false;
  DecodeGraphStats stats_;
};

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_DECODE_GRAPH_CACHE_H_
