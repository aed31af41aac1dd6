// The tokenizer.json pipeline (see hf_tokenizer.h). Encoding mirrors HF's
// AddedVocabulary::extract_and_normalize followed by pre-tokenization and the model: the
// normalizer runs on each stretch between raw added tokens separately (so a Prepend "▁"
// lands after "<s>" too, as in HF), and Metaspace's prepend_scheme "first" applies only to
// the stretch that starts at offset 0 of the input.
#include "common/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace scd::tokenizer_internal {
namespace {

// HF ignores the ids written in "added_tokens" and re-adds the tokens in order
// (serialization.rs -> AddedVocabulary::add_tokens): a token whose content is already in the
// model vocabulary takes that id; a new one takes the next id after the largest added id, or
// the vocabulary size when no added id reaches beyond the vocabulary. In consistent files
// (every real checkpoint) this reproduces the written ids; we follow HF where they differ.
// A repeated content keeps its first entry.
std::vector<AddedToken> ResolveAddedTokenIds(std::vector<AddedToken> tokens,
                                             const BpeModel& model) {
  std::vector<AddedToken> resolved;
  std::unordered_set<std::string> seen;
  const int64_t vocab_count = model.vocab_count();
  int64_t max_added = -1;
  for (AddedToken& t : tokens) {
    if (!seen.insert(t.content).second) continue;
    const int32_t in_vocab = model.TokenToId(t.content);
    if (in_vocab >= 0) {
      t.id = in_vocab;
    } else if (max_added < 0) {
      t.id = static_cast<int32_t>(vocab_count);
    } else {
      t.id = static_cast<int32_t>((max_added >= vocab_count || vocab_count == 0) ? max_added + 1
                                                                                 : vocab_count);
    }
    max_added = std::max<int64_t>(max_added, t.id);
    resolved.push_back(std::move(t));
  }
  return resolved;
}

// Decode state for one stream: token strings through the decoder pipeline.
class HfDecodeStream final : public Tokenizer::DecodeStream {
 public:
  HfDecodeStream(const HfTokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer),
        skip_special_(skip_special_tokens),
        state_(tokenizer.decoder().NewState()) {}

  std::string Push(int32_t id) override {
    std::string out;
    if (const std::string* token = tokenizer_.DecodeToken(id, skip_special_)) {
      state_.PushToken(*token, &out);
    }
    return out;
  }

  std::string Flush() override {
    std::string out;
    state_.Flush(&out);
    state_ = tokenizer_.decoder().NewState();
    return out;
  }

 private:
  const HfTokenizer& tokenizer_;
  bool skip_special_;
  DecoderPipeline::State state_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(Parts parts) {
  if (parts.model == nullptr || parts.decoder == nullptr) {
    return absl::InvalidArgumentError("tokenizer.json: a model and a decoder are required");
  }
  parts.added_tokens = ResolveAddedTokenIds(std::move(parts.added_tokens), *parts.model);
  // The ids the post-processor adds (BOS, EOS) must be tokens: one past the vocabulary would
  // address an embedding row that does not exist.
  for (const std::vector<int32_t>* ids :
       {&parts.post_processor.prefix(), &parts.post_processor.suffix()}) {
    for (int32_t id : *ids) {
      const bool added = std::any_of(parts.added_tokens.begin(), parts.added_tokens.end(),
                                     [id](const AddedToken& t) { return t.id == id; });
      if (!added && parts.model->IdToToken(id) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer.json: post_processor: special token id ", id, " is not in the vocabulary"));
      }
    }
  }
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(parts)));
}

HfTokenizer::HfTokenizer(Parts parts)
    : parts_(std::move(parts)), added_(parts_.added_tokens, parts_.normalizer.get()) {
  vocab_size_ = parts_.model->max_id() + 1;
  for (const AddedToken& t : added_.tokens()) vocab_size_ = std::max(vocab_size_, t.id + 1);

  const std::vector<int32_t>& prefix = parts_.post_processor.prefix();
  const std::vector<int32_t>& suffix = parts_.post_processor.suffix();
  bos_id_ = !prefix.empty()
                ? prefix.front()
                : FindSpecialByName({"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>"});
  eos_id_ = !suffix.empty() ? suffix.back()
                            : FindSpecialByName({"</s>", "<|end_of_text|>", "<|endoftext|>",
                                                 "<|im_end|>", "<eos>", "<|eot_id|>"});
}

int32_t HfTokenizer::FindSpecialByName(std::initializer_list<std::string_view> names) const {
  for (std::string_view name : names) {
    const int32_t id = TokenId(name);
    if (id >= 0) return id;
  }
  return -1;
}

std::vector<int32_t> HfTokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  for (const TextSegment& seg : added_.SplitRaw(text)) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      EncodeStretch(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, &ids);
    }
  }
  return add_special_tokens ? parts_.post_processor.Apply(std::move(ids)) : ids;
}

void HfTokenizer::EncodeStretch(std::string_view text, bool at_start,
                                std::vector<int32_t>* ids) const {
  const std::string normalized =
      parts_.normalizer != nullptr ? parts_.normalizer->Normalize(text) : std::string(text);
  for (const TextSegment& seg : added_.SplitNormalized(normalized)) {
    if (seg.id >= 0) {
      ids->push_back(seg.id);
      continue;
    }
    const std::string_view piece =
        std::string_view(normalized).substr(seg.begin, seg.end - seg.begin);
    if (parts_.pre_tokenizer != nullptr) {
      parts_.pre_tokenizer->Split(piece, at_start && seg.begin == 0, [&](std::string_view word) {
        parts_.model->Tokenize(word, ids);
      });
    } else {
      parts_.model->Tokenize(piece, ids);
    }
  }
}

const std::string* HfTokenizer::DecodeToken(int32_t id, bool skip_special_tokens) const {
  if (const AddedToken* added = added_.FindById(id)) {
    if (skip_special_tokens && added->special) return nullptr;
    return &added->decoded;
  }
  return parts_.model->IdToToken(id);
}

std::string HfTokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  DecoderPipeline::State state = parts_.decoder->NewState();
  for (int32_t id : ids) {
    if (const std::string* token = DecodeToken(id, skip_special_tokens)) {
      state.PushToken(*token, &out);
    }
  }
  state.Flush(&out);
  return out;
}

int32_t HfTokenizer::TokenId(std::string_view token) const {
  if (const AddedToken* added = added_.FindByContent(token)) return added->id;
  return parts_.model->TokenToId(token);
}

bool HfTokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = added_.FindById(id);
  return added != nullptr && added->special;
}

std::unique_ptr<Tokenizer::DecodeStream> HfTokenizer::NewDecodeStream(
    bool skip_special_tokens) const {
  return std::make_unique<HfDecodeStream>(*this, skip_special_tokens);
}

}  // namespace scd::tokenizer_internal
