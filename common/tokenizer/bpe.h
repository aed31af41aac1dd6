// The tokenizer.json "model" of type BPE: vocabulary, ranked merges, and the per-word merge
// algorithm. A word is first split into characters (each looked up in the vocabulary; with
// byte_fallback a missing character becomes its UTF-8 bytes as <0xNN> tokens, otherwise the
// unk token, consecutive unks fused when fuse_unk), then the adjacent pair with the lowest
// merge rank is merged, leftmost first on ties, until no ranked pair remains - exactly HF's
// models/bpe/word.rs. Results for short words are cached (HF does the same).
// SentencePiece-style files have no pre-tokenizer, so the whole normalized text is one "word";
// when the vocabulary proves that no token can span the boundary before a "▁" that follows
// another character, such words are cut there first, which gives identical ids while keeping
// the merge heaps small and the pieces cacheable.
#ifndef SCD_COMMON_TOKENIZER_BPE_H_
#define SCD_COMMON_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/json_fields.h"

namespace scd::tokenizer_internal {

class BpeModel {
 public:
  // `json` is the "model" object. Ids must be in [0, kMaxTokenId]. Merges may be "a b" strings
  // or ["a", "b"] pairs; both sides and their concatenation must be in the vocabulary.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& json,
                                                            std::string_view path);

  static constexpr int32_t kMaxTokenId = (1 << 24) - 1;

  // Appends the ids of one pre-tokenized word. Thread-safe.
  void Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  int32_t TokenToId(std::string_view token) const;  // -1 when absent
  const std::string* IdToToken(int32_t id) const;   // nullptr when absent
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  // Number of vocabulary entries (HF's get_vocab_size(), which sizes added-token ids).
  int32_t vocab_count() const { return static_cast<int32_t>(vocab_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };

  struct Symbol;     // one symbol of the word being merged (defined in bpe.cc)
  struct Candidate;  // a pending merge of two neighbouring symbols (defined in bpe.cc)

  BpeModel() = default;
  absl::Status ParseMerges(const Json& merges, std::string_view path);
  void TokenizeCached(std::string_view word, std::vector<int32_t>* ids) const;
  void TokenizeUncached(std::string_view word, std::vector<int32_t>* ids) const;
  // Appends `word`'s symbols before any merge: vocabulary characters, byte-fallback bytes and
  // (fused) unk runs.
  void InitialSymbols(std::string_view word, std::vector<Symbol>& symbols) const;
  // Applies merges to `symbols` in (rank, position) order until none is left; `queue` holds
  // the heap.
  void MergeSymbols(std::vector<Symbol>& symbols, std::vector<Candidate>& queue) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_;  // <0xNN> token ids, -1 when absent
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool split_before_metaspace_ = false;  // see the file comment

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 16;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_BPE_H_
