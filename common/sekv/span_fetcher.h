// SpanFetcher: zoom-in fetches from the CPU tier into the GPU tier's expansion buffer (SeKV
// "zoom-in": expanded spans are rebuilt from their CPU bases asynchronously, overlapped with
// other work, and recently expanded content is cached).
//
// The unit is one token row of a span (span s, offset i): a whole-span expansion requests
// every row of the span, a token-resolution expansion (sekv_cache.h) only the rows the query
// attends to. Per (layer, KV head) the buffer is a fixed slab of `capacity_tokens` rows (K
// and V, head_dim floats each) with an LRU over the rows it holds. That slab is the
// GPU-resident expansion buffer: its full capacity is counted in the GPU tier
// (CapacityBytes), whether filled or not (the host allocates a slab at its first request).
//
// Request() starts a round: the rows one decode step needs. Rows already in the slab are hits;
// misses take a free or least-recently-used slot (never one requested in this round or still
// being written) and are queued to a worker thread that rebuilds them (row i of U_rΣ_r V_rᵀ),
// while the caller goes on with the resident part of attention (anchors, summaries, window)
// for every head. Get() then waits until the round's rows are written and returns the slab
// with a mask of the round's rows, so attention reads the buffer in place. With async = false
// the rebuild happens inline in Request() (the reference behaviour the tests compare against).
// A round never asks for more rows than the capacity; extra rows are dropped and counted.
#ifndef SCD_COMMON_SEKV_SPAN_FETCHER_H_
#define SCD_COMMON_SEKV_SPAN_FETCHER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"
#include "common/sekv/span_store.h"

namespace scd::sekv {

// One token of a span: its index and its offset inside the span.
struct TokenRef {
  int span = 0;
  int offset = 0;
};

struct FetchStats {
  long requests = 0, hits = 0, misses = 0;  // in token rows
  long tokens_rebuilt = 0;
  long dropped = 0;    // rows beyond the capacity, left out of their round
  double wait_ms = 0;  // time Get() spent waiting for the worker
};

// The expansion buffer of one (layer, KV head) after a round: rows [capacity, head_dim];
// active[i] != 0 for the rows of the current round.
struct BufferView {
  const float* k = nullptr;
  const float* v = nullptr;
  const uint8_t* active = nullptr;
  int rows = 0;
};

class SpanFetcher {
 public:
  SpanFetcher(int num_layers, int num_kv_heads, int head_dim, int capacity_tokens, bool async);
  ~SpanFetcher();
  SpanFetcher(const SpanFetcher&) = delete;
  SpanFetcher& operator=(const SpanFetcher&) = delete;

  // Starts a round for (layer, head): the rows to expand now. Misses are rebuilt from `store`
  // (which must outlive the fetcher).
  void Request(int layer, int head, const SpanStore& store, absl::Span<const TokenRef> rows);
  // Waits until this round's rows are in the buffer and returns it.
  BufferView Get(int layer, int head);

  int capacity_tokens() const { return capacity_tokens_; }
  // Bytes of every (layer, head) buffer at full capacity: L·H·capacity·2·head_dim floats.
  size_t CapacityBytes() const;
  FetchStats stats() const;

 private:
  struct Slot {
    int64_t key = -1;  // span << 32 | offset; -1 = free
    uint64_t round = 0;
    bool ready = false;
    std::list<int>::iterator lru;  // position in the bucket's LRU list (front = newest)
  };
  struct Bucket {
    std::vector<float> k, v;  // [capacity, head_dim]
    std::vector<Slot> slots;
    std::vector<uint8_t> active;
    std::unordered_map<int64_t, int> index;  // key -> slot
    std::list<int> lru;                      // occupied slots
    std::vector<int> free;
    int pending = 0;  // rows of any round still being rebuilt
  };
  struct Job {
    int layer, head, slot;
    TokenRef row;
    const SpanStore* store;
  };
  Bucket& bucket(int layer, int head) {
    return buckets_[static_cast<size_t>(layer) * num_kv_heads_ + head];
  }
  // The bucket, its slab allocated at its first use (with mu_ held): a fetcher nobody asks,
  // such as a GPU path's that zooms on the device, holds no rows.
  Bucket& Ready(int layer, int head);
  void Run(const Job& job);  // rebuilds one row into its slot (without the lock)
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
