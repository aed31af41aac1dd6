// SpanFetcher: zoom-in fetches from the CPU tier and the cache of recently expanded spans
// (SeKV "zoom-in": expanded spans are rebuilt from their CPU bases asynchronously, overlapped
// with other work, and recently expanded spans are cached).
//
// Per (layer, KV head) an LRU cache holds rebuilt spans (K and V, [|S|, head_dim] each) up to
// `capacity_tokens` tokens. That cache is the GPU-resident expansion buffer: its full
// capacity is counted in the GPU tier (CapacityBytes), whether filled or not.
//
// Request() marks the spans one decode step needs. Hits are served from the cache; misses
// are queued to a worker thread that rebuilds them (U_rΣ_r V_rᵀ), while the caller goes on
// with the resident part of attention (anchors, summaries, window) for every head. Get()
// then waits for a span, usually already done. With async = false the rebuild happens inline
// in Request() (the reference behaviour the tests compare against). Eviction never drops a
// span requested in the current round; entries are handed out as shared_ptr, so an eviction
// never invalidates one being read.
#ifndef SCD_COMMON_SEKV_SPAN_FETCHER_H_
#define SCD_COMMON_SEKV_SPAN_FETCHER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"
#include "common/sekv/span_store.h"

namespace scd::sekv {

struct ExpandedSpan {
  int length = 0;
  std::vector<float> k, v;  // [length, head_dim]
};

struct FetchStats {
  long requests = 0, hits = 0, misses = 0;
  long tokens_rebuilt = 0;
  double wait_ms = 0;  // time Get() spent waiting for the worker
};

class SpanFetcher {
 public:
  SpanFetcher(int num_layers, int num_kv_heads, int head_dim, int capacity_tokens, bool async);
  ~SpanFetcher();
  SpanFetcher(const SpanFetcher&) = delete;
  SpanFetcher& operator=(const SpanFetcher&) = delete;

  // Starts a round for (layer, head): the spans to expand now. Misses are rebuilt from
  // `store` (which must outlive the fetcher).
  void Request(int layer, int head, const SpanStore& store, absl::Span<const int> spans);
  // The rebuilt span (waits for the worker when it is still in flight).
  std::shared_ptr<const ExpandedSpan> Get(int layer, int head, int span);

  int capacity_tokens() const { return capacity_tokens_; }
  // Bytes of every (layer, head) buffer at full capacity: L·H·capacity·2·head_dim floats.
  size_t CapacityBytes() const;
  FetchStats stats() const;

 private:
  struct Slot {
    std::shared_ptr<const ExpandedSpan> data;  // null while in flight
    int length = 0;
    uint64_t round = 0;
    std::list<int>::iterator lru;  // position in its bucket's LRU list (front = newest)
  };
  struct Bucket {
    std::unordered_map<int, Slot> slots;
    std::list<int> lru;
    int tokens = 0;
  };
  struct Job {
    int layer, head, span;
    const SpanStore* store;
  };
  Bucket& bucket(int layer, int head) {
    return buckets_[static_cast<size_t>(layer) * num_kv_heads_ + head];
  }
  static std::shared_ptr<const ExpandedSpan> Build(const SpanStore& store, int head, int span);
  void WorkerLoop();

  const int num_layers_, num_kv_heads_, head_dim_, capacity_tokens_;
  const bool async_;
  std::vector<Bucket> buckets_;
  uint64_t round_ = 0;
  FetchStats stats_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SPAN_FETCHER_H_
