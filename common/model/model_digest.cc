// See model_digest.h. The stream hashed at level 2 is
//   "scd-model-digest-v1\n" ‖ canonical config JSON ‖ "\n" ‖
//   for each tensor: name ‖ NUL ‖ element count (u64 LE) ‖ its chunk hashes (32 B each),
// so names and counts frame the stream and no two layouts hash alike.
#include "common/model/model_digest.h"

#include <algorithm>

namespace scd {
namespace {

constexpr char kDigestTag[] = "scd-model-digest-v1\n";

}  // namespace

std::vector<DigestChunk> DigestChunks(const std::vector<WeightEntry>& layout,
                                      const ModelWeights& weights) {
  std::vector<DigestChunk> chunks;
  for (size_t t = 0; t < layout.size(); ++t) {
    const size_t n = WeightData(weights, layout[t]).size();
    size_t first = 0;
    do {
      const size_t count = std::min(kDigestChunkFloats, n - first);
      chunks.push_back({t, first, count});
      first += count;
    } while (first < n);
  }
  return chunks;
}

std::string CombineModelDigest(const ModelConfig& config, const std::vector<WeightEntry>& layout,
                               const ModelWeights& weights,
                               absl::Span<const Sha256::Digest> chunk_digests) {
  Sha256 root;
  root.Update(kDigestTag);
  root.Update(config.ToCanonicalJson());
  root.Update("\n");
  size_t chunk = 0;
  for (const WeightEntry& entry : layout) {
    root.Update(entry.name.data(), entry.name.size() + 1);  // with the NUL
    const uint64_t n = WeightData(weights, entry).size();
    uint8_t count[8];
    for (int i = 0; i < 8; ++i) count[i] = static_cast<uint8_t>(n >> (8 * i));
    root.Update(count, sizeof(count));
    const size_t chunks = n == 0 ? 1 : (n + kDigestChunkFloats - 1) / kDigestChunkFloats;
    for (size_t c = 0; c < chunks && chunk < chunk_digests.size(); ++c, ++chunk) {
      root.Update(chunk_digests[chunk].data(), chunk_digests[chunk].size());
    }
  }
  return Sha256::ToHex(root.Finish());
}

}  // namespace scd
