// StreamDecoder and the default Tokenizer::DecodeStream. Tokenizers from FromJson supply an
// exact incremental decoder (decoder.h); the default below serves other Tokenizer
// implementations (test doubles, future model families) by re-decoding everything and
// emitting only the part of the new text that extends what was already emitted, holding
// back a trailing U+FFFD that a later id might turn into a real character.
#include <string_view>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"

namespace scd {
namespace {

class RedecodeStream final : public Tokenizer::DecodeStream {
 public:
  RedecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

  std::string Push(int32_t id) override {
    ids_.push_back(id);
    std::string text = tokenizer_.Decode(ids_, skip_special_);
    std::string_view stable(text);
    while (stable.size() >= tokenizer_internal::kReplacementUtf8.size() &&
           stable.substr(stable.size() - tokenizer_internal::kReplacementUtf8.size()) ==
               tokenizer_internal::kReplacementUtf8) {
      stable.remove_suffix(tokenizer_internal::kReplacementUtf8.size());
    }
    return Emit(stable);
  }

  std::string Flush() override {
    std::string rest = Emit(tokenizer_.Decode(ids_, skip_special_));
    ids_.clear();
    emitted_.clear();
    return rest;
  }

 private:
  // The part of `text` beyond what was emitted, if `text` extends it.
  std::string Emit(std::string_view text) {
    if (text.size() <= emitted_.size() || text.substr(0, emitted_.size()) != emitted_) return "";
    std::string fresh(text.substr(emitted_.size()));
    emitted_.append(fresh);
    return fresh;
  }

  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  std::string emitted_;
};

}  // namespace

std::unique_ptr<Tokenizer::DecodeStream> Tokenizer::NewDecodeStream(
    bool skip_special_tokens) const {
  return std::make_unique<RedecodeStream>(*this, skip_special_tokens);
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_(skip_special_tokens),
      stream_(tokenizer.NewDecodeStream(skip_special_tokens)) {}

std::string StreamDecoder::Push(int32_t id) { return stream_->Push(id); }

std::string StreamDecoder::Flush() {
  std::string rest = stream_->Flush();
  stream_ = tokenizer_.NewDecodeStream(skip_special_);
  return rest;
}

}  // namespace scd
