// See span_fetcher.h.
#include "common/sekv/span_fetcher.h"

#include <chrono>

namespace scd::sekv {

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

std::shared_ptr<const ExpandedSpan> SpanFetcher::Build(const SpanStore& store, int head, int span) {
  auto e = std::make_shared<ExpandedSpan>();
  e->length = store.span_length(span);
  e->k.resize(static_cast<size_t>(e->length) * store.head_dim());
  e->v.resize(e->k.size());
  store.Rebuild(span, head, e->k.data(), e->v.data());
  return e;
}

void SpanFetcher::Request(int layer, int head, const SpanStore& store,
                          absl::Span<const int> spans) {
  std::vector<Job> inline_jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t round = ++round_;
    Bucket& b = bucket(layer, head);
    for (int s : spans) {
      ++stats_.requests;
      auto it = b.slots.find(s);
      if (it != b.slots.end()) {
        ++stats_.hits;
        it->second.round = round;
        b.lru.splice(b.lru.begin(), b.lru, it->second.lru);
        continue;
      }
      ++stats_.misses;
      const int len = store.span_length(s);
      // Make room: drop the least recently used spans not needed in this round.
      auto victim = b.lru.end();
      while (b.tokens + len > capacity_tokens_ && victim != b.lru.begin()) {
        --victim;
        Slot& v = b.slots.at(*victim);
        if (v.round == round || v.data == nullptr) continue;
        b.tokens -= v.length;
        auto erase_it = victim++;
        b.slots.erase(*erase_it);
        b.lru.erase(erase_it);
      }
      b.lru.push_front(s);
      Slot slot;
      slot.length = len;
      slot.round = round;
      slot.lru = b.lru.begin();
      b.slots.emplace(s, std::move(slot));
      b.tokens += len;
      stats_.tokens_rebuilt += len;
      Job job{layer, head, s, &store};
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
  for (const Job& j : inline_jobs) {
    auto data = Build(*j.store, j.head, j.span);
    std::lock_guard<std::mutex> lock(mu_);
    bucket(j.layer, j.head).slots.at(j.span).data = std::move(data);
  }
}

std::shared_ptr<const ExpandedSpan> SpanFetcher::Get(int layer, int head, int span) {
  std::unique_lock<std::mutex> lock(mu_);
  Bucket& b = bucket(layer, head);
  auto it = b.slots.find(span);
  if (it == b.slots.end()) return nullptr;
  if (it->second.data == nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    done_cv_.wait(lock, [&] { return b.slots.at(span).data != nullptr; });
    stats_.wait_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    it = b.slots.find(span);
  }
  return it->second.data;
}

void SpanFetcher::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const Job j = queue_.front();
    queue_.pop_front();
    lock.unlock();
    auto data = Build(*j.store, j.head, j.span);
    lock.lock();
    auto& slots = bucket(j.layer, j.head).slots;
    auto it = slots.find(j.span);
    if (it != slots.end()) it->second.data = std::move(data);
    done_cv_.notify_all();
  }
}

}  // namespace scd::sekv
