// PrefixCache: the prefill daemon's shared-prefix cache of encoded payloads (the SCD use
// case: one base model prefills a common prefix once — a user's history, instructions — and
// many specialists consume it). Entries are keyed by (pair digest, codec mode, token prefix);
// a lookup returns the longest cached prefix of a prompt, so a request whose prompt extends a
// cached prefix reuses its codes and only the suffix is computed downstream.
//
// Partial matches: a request rarely extends another request's whole prompt (two questions
// about one story share the story, not each other's question). As in vLLM's block-granular
// prefix caching, every entry is also findable at each multiple of `block_tokens` below its
// length, so a prompt that shares only the first k*block_tokens tokens of a cached prompt hits
// that entry with `length` = k*block_tokens; the caller cuts the payload down to that many
// tokens (PayloadPrefix). Bounded by a byte cap with least-recently-used eviction.
// Thread-safe. Hit/miss counters feed /metrics.
#ifndef SCD_COMMON_SERVING_PREFIX_CACHE_H_
#define SCD_COMMON_SERVING_PREFIX_CACHE_H_

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/types/span.h"

namespace scd {

struct CachedPrefix {
  std::vector<int32_t> tokens;   // the prefix the payload covers
  std::vector<uint8_t> payload;  // serialized SCD payload for exactly these tokens
};

struct PrefixCacheStats {
  long hits = 0, misses = 0, insertions = 0, evictions = 0;
  long partial_hits = 0;  // hits at a block boundary inside a longer entry (also in hits)
  size_t bytes = 0, entries = 0;
};

// A lookup result: the first `length` tokens of `entry` are a prefix of the prompt.
struct PrefixHit {
  std::shared_ptr<const CachedPrefix> entry;  // null on a miss
  int length = 0;  // entry->tokens.size(), or a multiple of block_tokens below it
  explicit operator bool() const { return entry != nullptr; }
  bool partial() const {
    return entry != nullptr && length < static_cast<int>(entry->tokens.size());
  }
};

class PrefixCache {
 public:
  // `block_tokens` = 0 turns partial matches off.
  explicit PrefixCache(size_t max_bytes, int block_tokens = 0)
      : max_bytes_(max_bytes), block_tokens_(block_tokens < 0 ? 0 : block_tokens) {}

  // The longest cached prefix of `prompt` for (pair, mode), at least `min_tokens` long and
  // strictly shorter than the prompt (the consumer must prefill at least one token itself).
  PrefixHit Lookup(const std::string& pair, int mode, absl::Span<const int32_t> prompt,
                   int min_tokens = 1);
  // The length Lookup would hit, without counting it or refreshing the entry: for weighing a
  // candidate mode before using one.
  int Peek(const std::string& pair, int mode, absl::Span<const int32_t> prompt,
           int min_tokens = 1) const;
  // Inserts (or refreshes) an entry; entries larger than the cap are not cached.
  void Insert(const std::string& pair, int mode, std::vector<int32_t> tokens,
              std::vector<uint8_t> payload);

  PrefixCacheStats stats() const;

 private:
  using Key = std::pair<std::string, uint64_t>;  // (pair/mode tag, rolling hash)
  struct Entry {
    std::string tag;
    uint64_t hash;
    std::shared_ptr<const CachedPrefix> value;
    size_t bytes;
  };
  static uint64_t Extend(uint64_t h, int32_t token);
  void EvictLocked();
  // The longest cached prefix of `prompt` under `tag` (length 0: none).
  struct Found {
    std::list<Entry>::iterator entry;
    int length = 0;
    bool partial = false;  // at a block boundary inside a longer entry
  };
  Found FindLocked(const std::string& tag, absl::Span<const int32_t> prompt, int min_tokens) const;

  void IndexBlocksLocked(std::list<Entry>::iterator it, bool add);
  void RemoveLocked(std::list<Entry>::iterator it);

  size_t max_bytes_;
  int block_tokens_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front = most recent
  std::map<Key, std::list<Entry>::iterator> index_;
  // (tag, hash of the first k*block_tokens tokens) → entries longer than that.
  std::map<Key, std::set<const Entry*>> block_index_;
  std::map<std::string, std::multiset<size_t>> lengths_;  // tag → cached prefix lengths
  PrefixCacheStats stats_;
};

}  // namespace scd

#endif  // SCD_COMMON_SERVING_PREFIX_CACHE_H_
