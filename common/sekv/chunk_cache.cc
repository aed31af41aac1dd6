// See chunk_cache.h.
#include "common/sekv/chunk_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace scd::sekv {

Segmentation ChunkSegmentation(int t, const ChunkOptions& o) {
  Segmentation seg;
  seg.num_tokens = t;
  const int sinks = std::min(o.sink_tokens, t);
  for (int i = 0; i < sinks; ++i) seg.anchors.push_back(i);
  seg.window_begin = std::max(sinks, t - o.window);
  const int middle = seg.window_begin - sinks;
  if (o.num_chunks > 0) {
    const int n = std::min(o.num_chunks, middle);
    for (int i = 0; i < n; ++i) {
      seg.spans.push_back({sinks + static_cast<int>(static_cast<long>(middle) * i / n),
                           sinks + static_cast<int>(static_cast<long>(middle) * (i + 1) / n)});
    }
    return seg;
  }
  for (int b = sinks; b < seg.window_begin; b += o.chunk_size) {
    seg.spans.push_back({b, std::min(b + o.chunk_size, seg.window_begin)});
  }
  return seg;
}

absl::StatusOr<std::unique_ptr<SekvCache>> CreateChunkCache(const CacheShape& shape,
                                                            const PrefixKv& prefix,
                                                            const ChunkOptions& options) {
  if (options.chunk_size < 1 || options.num_chunks < 0 || options.window < 0 ||
      options.sink_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid chunk options (chunk_size ", options.chunk_size, ")"));
  }
  SekvOptions so;
  so.zoom = false;
  so.expand_budget = 0;
  so.store.build_cpu_tier = false;
  so.store.key_weighting = SummaryWeighting::kUniform;
  return SekvCache::CreateWithSegmentation(
      shape, prefix, ChunkSegmentation(prefix.num_tokens, options), so, nullptr);
}

}  // namespace scd::sekv
