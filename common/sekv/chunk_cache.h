// Static chunk summaries: the semantic-compression baseline without zoom-in, in the manner of
// ChunkKV / SentenceKV (a compressed unit per chunk of text instead of per token). The prompt
// between the sink tokens and the recent window is cut into fixed-size chunks; each chunk is
// one (mean K, mean V) entry with the log|C| size correction, and nothing is ever expanded.
// It is a SekvCache over a fixed-size segmentation with uniform weights and zoom off, so the
// two methods differ only in what SEKV adds: surprisal boundaries, anchors and zoom-in.
#ifndef SCD_COMMON_SEKV_CHUNK_CACHE_H_
#define SCD_COMMON_SEKV_CHUNK_CACHE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/sekv/sekv_cache.h"

namespace scd::sekv {

struct ChunkOptions {
  int chunk_size = 8;
  int num_chunks = 0;  // > 0: cut into this many near-equal chunks instead (chunk_size ignored)
  int window = 32;
  int sink_tokens = 1;
};

// Sinks as anchors, chunks of chunk_size (the last may be shorter) or num_chunks near-equal
// chunks as spans, then the window.
Segmentation ChunkSegmentation(int num_tokens, const ChunkOptions& options);

absl::StatusOr<std::unique_ptr<SekvCache>> CreateChunkCache(const CacheShape& shape,
                                                            const PrefixKv& prefix,
                                                            const ChunkOptions& options);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_CHUNK_CACHE_H_
