// See prefix_cache.h. Prompt prefixes are hashed incrementally (one multiply-xor per token),
// and only lengths that some entry has are probed; a probe hit is confirmed token by token,
// so a hash collision can cost a miss but never returns the wrong codes.
#include "common/serving/prefix_cache.h"

#include <algorithm>

namespace scd {

uint64_t PrefixCache::Extend(uint64_t h, int32_t token) {
  h ^= static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ULL + (h << 6) +
       (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

std::shared_ptr<const CachedPrefix> PrefixCache::Lookup(const std::string& pair, int mode,
                                                        absl::Span<const int32_t> prompt,
                                                        int min_tokens) {
  const std::string tag = pair + "/" + std::to_string(mode);
  std::lock_guard<std::mutex> lock(mu_);
  auto lengths = lengths_.find(tag);
  if (lengths == lengths_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  std::vector<uint64_t> hashes(prompt.size() + 1, 0);
  for (size_t i = 0; i < prompt.size(); ++i) hashes[i + 1] = Extend(hashes[i], prompt[i]);
  for (auto it = lengths->second.rbegin(); it != lengths->second.rend(); ++it) {
    const size_t n = *it;
    if (n >= prompt.size() || static_cast<int>(n) < min_tokens) continue;
    auto hit = index_.find({tag, hashes[n]});
    if (hit == index_.end()) continue;
    const auto& value = hit->second->value;
    if (value->tokens.size() != n || !std::equal(value->tokens.begin(), value->tokens.end(),
                                                 prompt.begin())) {
      continue;
    }
    lru_.splice(lru_.begin(), lru_, hit->second);
    ++stats_.hits;
    return value;
  }
  ++stats_.misses;
  return nullptr;
}

void PrefixCache::Insert(const std::string& pair, int mode, std::vector<int32_t> tokens,
                         std::vector<uint8_t> payload) {
  const size_t bytes = payload.size() + tokens.size() * sizeof(int32_t);
  if (bytes > max_bytes_ || tokens.empty()) return;
  const std::string tag = pair + "/" + std::to_string(mode);
  uint64_t h = 0;
  for (int32_t t : tokens) h = Extend(h, t);
  std::lock_guard<std::mutex> lock(mu_);
  auto existing = index_.find({tag, h});
  if (existing != index_.end()) {  // refresh
    stats_.bytes -= existing->second->bytes;
    auto& lens = lengths_[tag];
    lens.erase(lens.find(existing->second->value->tokens.size()));
    lru_.erase(existing->second);
    index_.erase(existing);
  }
  const size_t n = tokens.size();
  auto value = std::make_shared<CachedPrefix>(CachedPrefix{std::move(tokens), std::move(payload)});
  lru_.push_front({tag, h, std::move(value), bytes});
  index_[{tag, h}] = lru_.begin();
  lengths_[tag].insert(n);
  stats_.bytes += bytes;
  ++stats_.insertions;
  EvictLocked();
}

void PrefixCache::EvictLocked() {
  while (stats_.bytes > max_bytes_ && !lru_.empty()) {
    Entry& victim = lru_.back();
    stats_.bytes -= victim.bytes;
    auto& lens = lengths_[victim.tag];
    lens.erase(lens.find(victim.value->tokens.size()));
    if (lens.empty()) lengths_.erase(victim.tag);
    index_.erase({victim.tag, victim.hash});
    lru_.pop_back();
    ++stats_.evictions;
  }
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheStats s = stats_;
  s.entries = lru_.size();
  return s;
}

}  // namespace scd
