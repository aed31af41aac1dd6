// Decode graphs: the CUDA backend's decode steps recorded as CUDA graphs and replayed with one
// launch instead of a few hundred (DecodeGraphOptions, SetDecodeGraphs), kept in a
// DecodeGraphCache. A graph replays the pointers and sizes it recorded, so each is kept under a
// key holding all of them: the buffers every step records (activations, logits, workspaces,
// metadata) with their sizes, then the step's own shape and metadata layout. When a buffer
// moves (it grew), no cached graph can be replayed again and all are dropped. At most
// max_graphs are held, the least recently used dropped first. CUDA-free header.
#ifndef SCD_COMMON_RUNTIME_CUDA_DECODE_GRAPH_CACHE_H_
#define SCD_COMMON_RUNTIME_CUDA_DECODE_GRAPH_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "common/runtime/backend.h"
#include "kernels/cuda/device_memory.h"

namespace scd::cuda {

// CUDA graphs for the backend's decode steps (Decode, DecodeSample): the step's work through
// the logits is recorded once per shape (batch size, the length bucket of
// split_plan::DecodeLengthBucket, the metadata layout and the buffers it uses) and replayed
// with one launch, instead of a few hundred kernel launches per step. Sampling and the copy
// back run after it as usual. Graphed and eager steps run the same kernels on the same
// plan, so their results are identical. A capture CUDA refuses turns graphs off for good
// (the step still runs, eagerly); Backend::decode_graph_stats() says so.
struct DecodeGraphOptions {
  bool enabled = true;
  int max_batch = 64;   // larger batches run eagerly
  int max_graphs = 64;  // cached graphs; the least recently used is dropped beyond this
};

// Sets `backend`'s decode-graph options (dropping its cached graphs). Fails when `backend` is
// not CUDA or the options are out of range. Backend::decode_graph_stats() reports the use.
absl::Status SetDecodeGraphs(Backend& backend, const DecodeGraphOptions& options);

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

#endif  // SCD_COMMON_RUNTIME_CUDA_DECODE_GRAPH_CACHE_H_
