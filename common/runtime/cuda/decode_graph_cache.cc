// See decode_graph_cache.h.
#include "common/runtime/cuda/decode_graph_cache.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace scd::cuda {

absl::Status DecodeGraphCache::Configure(const DecodeGraphOptions& options) {
  if (options.max_batch < 0 || options.max_graphs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("decode graphs: max_batch ", options.max_batch,
                                                   " must be >= 0 and max_graphs ",
                                                   options.max_graphs, " >= 1"));
  }
  options_ = options;
  graphs_.clear();
  broken_ = false;
  return absl::OkStatus();
}

absl::Status DecodeGraphCache::Run(int batch, const std::vector<uintptr_t>& buffers,
                                   const std::vector<uintptr_t>& key, StreamHandle stream,
                                   const std::function<absl::Status()>& forward) {
  if (!options_.enabled || broken_ || batch > options_.max_batch) {
    ++stats_.eager_steps;
    return forward();
  }
  if (graphs_.empty() || graphs_.front().buffers != buffers) graphs_.clear();
  std::vector<uintptr_t> full_key = buffers;
  full_key.insert(full_key.end(), key.begin(), key.end());
  for (Cached& cached : graphs_) {
    if (cached.key == full_key) {
      cached.last_use = ++clock_;
      ++stats_.replays;
      return cached.graph->Launch(stream);
    }
  }
  absl::StatusOr<std::unique_ptr<Graph>> graph = Graph::Capture(stream, forward);
  if (!graph.ok()) {
    ++stats_.eager_steps;
    SCD_RETURN_IF_ERROR(forward());  // the step's own error, if it has one
    ++stats_.capture_failures;
    stats_.last_failure = std::string(graph.status().message());
    broken_ = true;
    graphs_.clear();
    return absl::OkStatus();
  }
  if (static_cast<int>(graphs_.size()) >= options_.max_graphs) {
    graphs_.erase(
        std::min_element(graphs_.begin(), graphs_.end(),
                         [](const Cached& a, const Cached& b) { return a.last_use < b.last_use; }));
    ++stats_.evictions;
  }
  ++stats_.captures;
  stats_.last_nodes = (*graph)->nodes();
  Cached cached;
  cached.buffers = buffers;
  cached.key = std::move(full_key);
  cached.graph = std::move(graph).value();
  cached.last_use = ++clock_;
  graphs_.push_back(std::move(cached));
  return graphs_.back().graph->Launch(stream);
}

DecodeGraphStats DecodeGraphCache::stats() const {
  DecodeGraphStats stats = stats_;
  stats.cached = static_cast<int>(graphs_.size());
  for (const Cached& cached : graphs_) stats.device_bytes += cached.graph->device_bytes();
  stats.active = options_.enabled && !broken_;
  return stats;
}

}  // namespace scd::cuda
