// See span_fetcher.h.
#include "common/sekv/span_fetcher.h"

#include <chrono>

namespace scd::sekv {
namespace {

int64_t Key(const TokenRef& r) {
  return (static_cast<int64_t>(r.span) << 32) | static_cast<uint32_t>(r.offset);
}

}  // namespace

SpanFetcher::SpanFetcher(int num_layers, int num_kv_heads, int head_dim, int capacity_tokens,
                         bool async)
    : num_layers_(num_layers),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      capacity_tokens_(capacity_tokens),
      async_(async),
      buckets_(static_cast<size_t>(num_layers) * num_kv_heads) {
  if (async_) worker_ = std::thread([this] { WorkerLoop(); });
}

SpanFetcher::Bucket& SpanFetcher::Ready(int layer, int head) {
  Bucket& b = bucket(layer, head);
  if (b.slots.empty() && capacity_tokens_ > 0) {
    b.k.assign(static_cast<size_t>(capacity_tokens_) * head_dim_, 0.0f);
    b.v.assign(b.k.size(), 0.0f);
    b.slots.resize(capacity_tokens_);
    b.active.assign(capacity_tokens_, 0);
    for (int i = capacity_tokens_ - 1; i >= 0; --i) b.free.push_back(i);
  }
  return b;
}

SpanFetcher::~SpanFetcher() {
  if (async_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    worker_.join();
  }
}

size_t SpanFetcher::CapacityBytes() const {
  return static_cast<size_t>(num_layers_) * num_kv_heads_ * capacity_tokens_ * 2 * head_dim_ *
         sizeof(float);
}

FetchStats SpanFetcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void SpanFetcher::Run(const Job& j) {
  Bucket& b = bucket(j.layer, j.head);
  const size_t off = static_cast<size_t>(j.slot) * head_dim_;
  j.store->RebuildRow(j.row.span, j.head, j.row.offset, b.k.data() + off, b.v.data() + off);
}

void SpanFetcher::Request(int layer, int head, const SpanStore& store,
                          absl::Span<const TokenRef> rows) {
  std::vector<Job> inline_jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t round = ++round_;
    Bucket& b = Ready(layer, head);
    std::fill(b.active.begin(), b.active.end(), 0);
    int placed = 0;
    for (const TokenRef& r : rows) {
      if (placed == capacity_tokens_) {
        ++stats_.dropped;
        continue;
      }
      ++stats_.requests;
      const int64_t key = Key(r);
      auto it = b.index.find(key);
      if (it != b.index.end()) {
        Slot& s = b.slots[it->second];
        if (s.round == round) continue;  // asked twice in one round
        ++stats_.hits;
        s.round = round;
        b.active[it->second] = 1;
        b.lru.splice(b.lru.begin(), b.lru, s.lru);
        ++placed;
        continue;
      }
      // A free slot, else the least recently used row not needed in this round and not being
      // written (there is one: at most `placed` < capacity slots belong to this round).
      int slot = -1;
      if (!b.free.empty()) {
        slot = b.free.back();
        b.free.pop_back();
      } else {
        for (auto v = b.lru.rbegin(); v != b.lru.rend(); ++v) {
          const Slot& cand = b.slots[*v];
          if (cand.round != round && cand.ready) {
            slot = *v;
            break;
          }
        }
        if (slot < 0) {  // every other row is still in flight: leave this one out
          ++stats_.dropped;
          continue;
        }
        b.index.erase(b.slots[slot].key);
        b.lru.erase(b.slots[slot].lru);
      }
      ++stats_.misses;
      ++stats_.tokens_rebuilt;
      b.lru.push_front(slot);
      Slot& s = b.slots[slot];
      s.key = key;
      s.round = round;
      s.ready = false;
      s.lru = b.lru.begin();
      b.index[key] = slot;
      b.active[slot] = 1;
      ++b.pending;
      ++placed;
      const Job job{layer, head, slot, r, &store};
      if (async_) {
        queue_.push_back(job);
      } else {
        inline_jobs.push_back(job);
      }
    }
  }
  if (async_) {
    work_cv_.notify_one();
    return;
  }
  for (const Job& j : inline_jobs) Run(j);
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = bucket(layer, head);
  for (const Job& j : inline_jobs) b.slots[j.slot].ready = true;
  b.pending -= static_cast<int>(inline_jobs.size());
}

BufferView SpanFetcher::Get(int layer, int head) {
  std::unique_lock<std::mutex> lock(mu_);
  Bucket& b = Ready(layer, head);
  if (b.pending > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    done_cv_.wait(lock, [&] { return b.pending == 0; });
    stats_.wait_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return {b.k.data(), b.v.data(), b.active.data(), capacity_tokens_};
}

void SpanFetcher::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Job j = queue_.front();
    queue_.pop_front();
    lock.unlock();
    Run(j);  // the slot is reserved for this job: nobody else touches its rows
    lock.lock();
    Bucket& b = bucket(j.layer, j.head);
    b.slots[j.slot].ready = true;
    --b.pending;
    done_cv_.notify_all();
  }
}

}  // namespace scd::sekv
