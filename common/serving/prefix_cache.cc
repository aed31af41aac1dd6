// See prefix_cache.h. Prompt prefixes are hashed incrementally (one multiply-xor per token).
// Lookup probes, from the longest candidate down, the lengths some entry has exactly and the
// block-aligned lengths; a probe hit is confirmed token by token, so a hash collision can cost
// a miss but never returns the wrong codes.
#include "common/serving/prefix_cache.h"

#include <algorithm>

namespace scd {

uint64_t PrefixCache::Extend(uint64_t h, int32_t token) {
  h ^= static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ULL + (h << 6) +
       (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

PrefixCache::Found PrefixCache::FindLocked(const std::string& tag, absl::Span<const int32_t> prompt,
                                           int min_tokens) const {
  auto lengths = lengths_.find(tag);
  if (lengths == lengths_.end() || prompt.size() < 2) return {};
  const size_t longest = std::min(prompt.size() - 1, *lengths->second.rbegin());
  std::vector<uint64_t> hashes(longest + 1, 0);
  for (size_t i = 0; i < longest; ++i) hashes[i + 1] = Extend(hashes[i], prompt[i]);
  auto matches = [&](const CachedPrefix& value, size_t n) {
    return value.tokens.size() >= n &&
           std::equal(value.tokens.begin(), value.tokens.begin() + n, prompt.begin());
  };
  const size_t floor = static_cast<size_t>(std::max(min_tokens, 1));
  for (size_t n = longest; n >= floor; --n) {
    if (lengths->second.count(n)) {
      auto hit = index_.find({tag, hashes[n]});
      if (hit != index_.end() && hit->second->value->tokens.size() == n &&
          matches(*hit->second->value, n)) {
        return {hit->second, static_cast<int>(n), false};
      }
    }
    if (block_tokens_ > 0 && n % static_cast<size_t>(block_tokens_) == 0) {
      auto block = block_index_.find({tag, hashes[n]});
      if (block != block_index_.end()) {
        for (const Entry* e : block->second) {
          if (!matches(*e->value, n)) continue;
          return {index_.find({e->tag, e->hash})->second, static_cast<int>(n), true};
        }
      }
    }
    if (n == floor) break;
  }
  return {};
}

PrefixHit PrefixCache::Lookup(const std::string& pair, int mode, absl::Span<const int32_t> prompt,
                              int min_tokens) {
  const std::string tag = pair + "/" + std::to_string(mode);
  std::lock_guard<std::mutex> lock(mu_);
  const Found found = FindLocked(tag, prompt, min_tokens);
  if (found.length == 0) {
    ++stats_.misses;
    return {};
  }
  lru_.splice(lru_.begin(), lru_, found.entry);
  ++stats_.hits;
  if (found.partial) ++stats_.partial_hits;
  return {found.entry->value, found.length};
}

int PrefixCache::Peek(const std::string& pair, int mode, absl::Span<const int32_t> prompt,
                      int min_tokens) const {
  const std::string tag = pair + "/" + std::to_string(mode);
  std::lock_guard<std::mutex> lock(mu_);
  return FindLocked(tag, prompt, min_tokens).length;
}

void PrefixCache::IndexBlocksLocked(std::list<Entry>::iterator it, bool add) {
  if (block_tokens_ <= 0) return;
  const auto& tokens = it->value->tokens;
  uint64_t h = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    h = Extend(h, tokens[i]);
    const size_t n = i + 1;
    if (n % static_cast<size_t>(block_tokens_) != 0 || n == tokens.size()) continue;
    const Key key{it->tag, h};
    if (add) {
      block_index_[key].insert(&*it);
    } else {
      auto found = block_index_.find(key);
      if (found == block_index_.end()) continue;
      found->second.erase(&*it);
      if (found->second.empty()) block_index_.erase(found);
    }
  }
}

void PrefixCache::RemoveLocked(std::list<Entry>::iterator it) {
  stats_.bytes -= it->bytes;
  auto& lens = lengths_[it->tag];
  lens.erase(lens.find(it->value->tokens.size()));
  if (lens.empty()) lengths_.erase(it->tag);
  IndexBlocksLocked(it, /*add=*/false);
  index_.erase({it->tag, it->hash});
  lru_.erase(it);
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
  if (existing != index_.end()) RemoveLocked(existing->second);  // refresh
  const size_t n = tokens.size();
  auto value = std::make_shared<CachedPrefix>(CachedPrefix{std::move(tokens), std::move(payload)});
  lru_.push_front({tag, h, std::move(value), bytes});
  index_[{tag, h}] = lru_.begin();
  lengths_[tag].insert(n);
  IndexBlocksLocked(lru_.begin(), /*add=*/true);
  stats_.bytes += bytes;
  ++stats_.insertions;
  EvictLocked();
}

void PrefixCache::EvictLocked() {
  while (stats_.bytes > max_bytes_ && !lru_.empty()) {
    RemoveLocked(std::prev(lru_.end()));
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
