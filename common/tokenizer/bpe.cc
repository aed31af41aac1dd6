// BPE merge loop (HF models/bpe/word.rs, Word::merge_all): symbols form a doubly linked list
// over the word; a min-heap holds candidate merges keyed by (rank, position). Popping the top
// merges that pair if it is still current (both symbols alive and the pair still maps to the
// same new id), then pushes the two pairs the new symbol forms with its neighbours. Each merge
// removes a symbol, so a word of n characters costs O(n log n), not the O(n^2) of rescanning.
#include "common/tokenizer/bpe.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/unicode.h"

namespace scd::tokenizer_internal {
namespace {

constexpr std::string_view kMetaspace = "\u2581";

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

struct BpeModel::Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;  // bytes of the word covered; 0 once merged into its left neighbour
};

struct BpeModel::Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& json,
                                                             std::string_view path) {
  if (!json.is_object()) return JsonError(path, "expected an object");
  SCD_ASSIGN_OR_RETURN(const std::string type, GetStringOr(json, "type", "BPE", path));
  if (type != "BPE") {
    return JsonError(JoinPath(path, "type"),
                     absl::StrCat("unsupported model type: ", type, " (only BPE is implemented)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    SCD_ASSIGN_OR_RETURN(const std::string affix, GetStringOr(json, key, "", path));
    if (!affix.empty()) return JsonError(JoinPath(path, key), "unsupported (only null or \"\")");
  }
  if (const Json* dropout = FindField(json, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      return JsonError(JoinPath(path, "dropout"), "BPE dropout is unsupported (use null)");
    }
  }

  auto model = std::unique_ptr<BpeModel>(new BpeModel);
  const Json* vocab = FindField(json, "vocab");
  const std::string vocab_path = JoinPath(path, "vocab");
  if (vocab == nullptr || !vocab->is_object()) return JsonError(vocab_path, "expected an object");
  int64_t max_id = -1;
  model->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return JsonError(JoinPath(vocab_path, it.key()), "expected an integer id");
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      return JsonError(JoinPath(vocab_path, it.key()), absl::StrCat("id out of range: ", id));
    }
    model->vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  model->id_to_token_.resize(max_id + 1);
  model->has_id_.assign(max_id + 1, false);
  for (const auto& [token, id] : model->vocab_) {
    model->id_to_token_[id] = token;
    model->has_id_[id] = true;
  }

  SCD_ASSIGN_OR_RETURN(model->byte_fallback_, GetBoolOr(json, "byte_fallback", false, path));
  SCD_ASSIGN_OR_RETURN(model->fuse_unk_, GetBoolOr(json, "fuse_unk", false, path));
  SCD_ASSIGN_OR_RETURN(model->ignore_merges_, GetBoolOr(json, "ignore_merges", false, path));
  SCD_ASSIGN_OR_RETURN(const std::string unk, GetStringOr(json, "unk_token", "", path));
  if (!unk.empty()) {
    model->unk_id_ = model->TokenToId(unk);
    if (model->unk_id_ < 0) {
      return JsonError(JoinPath(path, "unk_token"), absl::StrCat("not in vocab: ", unk));
    }
  }
  for (int b = 0; b < 256; ++b) {
    model->byte_ids_[b] = model->TokenToId(absl::StrFormat("<0x%02X>", b));
  }

  const Json* merges = FindField(json, "merges");
  if (merges != nullptr) SCD_RETURN_IF_ERROR(model->ParseMerges(*merges, JoinPath(path, "merges")));

  // Cutting a word before "▁" is exact when no token contains another character followed by
  // "▁" (so no merge can join across the cut), "▁" itself is a token (so a pending <unk> is
  // flushed there), and ignore_merges does not look the whole word up.
  bool crossing = model->ignore_merges_ || model->TokenToId(kMetaspace) < 0;
  for (const auto& [token, id] : model->vocab_) {
    for (size_t pos = token.find(kMetaspace, 1); !crossing && pos != std::string::npos;
         pos = token.find(kMetaspace, pos + 1)) {
      crossing = pos < kMetaspace.size() ||
                 token.compare(pos - kMetaspace.size(), kMetaspace.size(), kMetaspace) != 0;
    }
    if (crossing) break;
  }
  model->split_before_metaspace_ = !crossing;
  return model;
}

absl::Status BpeModel::ParseMerges(const Json& merges, std::string_view path) {
  if (!merges.is_array()) return JsonError(path, "expected an array");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& m = merges[rank];
    const std::string item_path = absl::StrCat(Sv(path), "[", rank, "]");
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return JsonError(item_path, absl::StrCat("expected \"left right\", got \"", s, "\""));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return JsonError(item_path, "expected a \"left right\" string or a [left, right] pair");
    }
    const int32_t left_id = TokenToId(left);
    const int32_t right_id = TokenToId(right);
    const int32_t new_id = TokenToId(left + right);
    if (left_id < 0 || right_id < 0 || new_id < 0) {
      return JsonError(item_path, absl::StrCat("merge \"", left, "\" + \"", right,
                                               "\" refers to a token missing from the vocab"));
    }
    // The first occurrence of a pair keeps its (lowest) rank.
    merges_.emplace(PairKey(left_id, right_id), Merge{static_cast<int32_t>(rank), new_id});
  }
  return absl::OkStatus();
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::Merge* BpeModel::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find(PairKey(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (!split_before_metaspace_) {
    TokenizeCached(word, ids);
    return;
  }
  size_t start = 0;
  for (size_t pos = word.find(kMetaspace, 1); pos != std::string_view::npos;
       pos = word.find(kMetaspace, pos + kMetaspace.size())) {
    const bool after_metaspace =
        pos >= kMetaspace.size() &&
        word.substr(pos - kMetaspace.size(), kMetaspace.size()) == kMetaspace;
    if (!after_metaspace && pos > start) {
      TokenizeCached(word.substr(start, pos - start), ids);
      start = pos;
    }
  }
  TokenizeCached(word.substr(start), ids);
}

void BpeModel::TokenizeCached(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = TokenToId(word);
    if (id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    TokenizeUncached(word, ids);
    return;
  }
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> word_ids;
  TokenizeUncached(word, &word_ids);
  ids->insert(ids->end(), word_ids.begin(), word_ids.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::move(key), std::move(word_ids));
}

void BpeModel::TokenizeUncached(std::string_view word, std::vector<int32_t>* ids) const {
  // Scratch buffers reused across calls on this thread: encoding allocates per word otherwise.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> queue;
  symbols.clear();
  queue.clear();
  symbols.reserve(word.size());
  InitialSymbols(word, symbols);
  MergeSymbols(symbols, queue);
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    ids->push_back(symbols[i].id);
  }
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<Symbol>& symbols) const {
  auto add = [&symbols](int32_t id, int32_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, len});
    if (index > 0) symbols[index - 1].next = index;
  };
  // Pending unk: HF emits it lazily so that consecutive unknown characters can fuse. As in HF,
  // a byte-fallback character does not flush it (it is only flushed by a vocab hit or the end).
  int32_t unk_len = 0;
  for (size_t pos = 0; pos < word.size();) {
    const Utf8Char c = DecodeUtf8(word, pos);
    const std::string_view ch = word.substr(pos, c.len);
    pos += c.len;
    const int32_t id = TokenToId(ch);
    if (id >= 0) {
      if (unk_len > 0) add(unk_id_, unk_len);
      unk_len = 0;
      add(id, c.len);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char b : ch) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all_bytes) {
        for (char b : ch) add(byte_ids_[static_cast<uint8_t>(b)], 1);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk token: the character is dropped, as in HF
    if (unk_len > 0 && !fuse_unk_) {
      add(unk_id_, unk_len);
      unk_len = 0;
    }
    unk_len += c.len;
  }
  if (unk_len > 0) add(unk_id_, unk_len);
}

void BpeModel::MergeSymbols(std::vector<Symbol>& symbols, std::vector<Candidate>& queue) const {
  // Min-heap on (rank, position) via std::*_heap with the reversed comparison.
  const auto later = std::greater<Candidate>();
  auto push = [&](Candidate c) {
    queue.push_back(c);
    std::push_heap(queue.begin(), queue.end(), later);
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      queue.push_back({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  std::make_heap(queue.begin(), queue.end(), later);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const Candidate top = queue.back();
    queue.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const int32_t right_index = left.next;
    Symbol& right = symbols[right_index];
    const Merge* current = FindMerge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* m = FindMerge(symbols[left.prev].id, left.id)) {
        push({m->rank, left.prev, m->new_id});
      }
    }
    if (left.next >= 0) {
      if (const Merge* m = FindMerge(left.id, symbols[left.next].id)) {
        push({m->rank, top.pos, m->new_id});
      }
    }
  }
}

}  // namespace scd::tokenizer_internal
