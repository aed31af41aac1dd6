// The two levels of the model digest (ComputeModelDigest in weights.h), exposed so that
// code producing weights chunk by chunk (MakeSyntheticModel) can hash each chunk while it is
// still in cache. Level 1: SHA-256 of each fixed 16 MB chunk of each tensor's F32 bytes.
// Level 2: SHA-256 of a tag, the canonical config JSON and, per tensor in WeightLayout
// order, its name, element count and chunk hashes. Fixed chunking keeps the digest
// independent of thread count.
#ifndef SCD_COMMON_MODEL_MODEL_DIGEST_H_
#define SCD_COMMON_MODEL_MODEL_DIGEST_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/base/sha256.h"
#include "common/model/config.h"
#include "common/model/weight_layout.h"
#include "common/model/weights.h"

namespace scd {

inline constexpr size_t kDigestChunkFloats = size_t{1} << 22;

struct DigestChunk {
  size_t tensor;  // index into the layout
  size_t first;   // first element of the tensor in this chunk
  size_t count;   // ≤ kDigestChunkFloats; 0 only for an empty tensor's single chunk
};

// Every tensor's chunks, in layout order (at least one per tensor).
std::vector<DigestChunk> DigestChunks(const std::vector<WeightEntry>& layout,
                                      const ModelWeights& weights);

// Level 2, given level-1 hashes `chunk_digests[i]` of `DigestChunks(layout, weights)[i]`.
std::string CombineModelDigest(const ModelConfig& config, const std::vector<WeightEntry>& layout,
                               const ModelWeights& weights,
                               absl::Span<const Sha256::Digest> chunk_digests);

}  // namespace scd

#endif  // SCD_COMMON_MODEL_MODEL_DIGEST_H_
