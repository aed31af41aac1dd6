// HfTokenizer: the Hugging Face tokenizer.json pipeline behind Tokenizer::FromJson.
//   Encode: cut out raw added tokens -> normalize each remaining stretch -> cut out normalized
//           added tokens -> pre-tokenize into words -> BPE each word -> post-process (BOS).
//   Decode: ids -> token strings (added tokens by content, special ones skipped on request)
//           -> the decoder chain, run incrementally (decoder.h), which also backs
//           StreamDecoder so that streaming and one-shot decoding agree by construction.
// This is HF's TokenizerImpl::encode / decode for the single-sequence case.
#ifndef SCD_COMMON_TOKENIZER_HF_TOKENIZER_H_
#define SCD_COMMON_TOKENIZER_HF_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/added_tokens.h"
#include "common/tokenizer/bpe.h"
#include "common/tokenizer/decoder.h"
#include "common/tokenizer/normalizer.h"
#include "common/tokenizer/post_processor.h"
#include "common/tokenizer/pre_tokenizer.h"
#include "common/tokenizer/tokenizer.h"

namespace scd::tokenizer_internal {

class HfTokenizer final : public Tokenizer {
 public:
  struct Parts {
    std::unique_ptr<Normalizer> normalizer;       // may be null
    std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null
    std::unique_ptr<BpeModel> model;
    PostProcessor post_processor;
    std::unique_ptr<DecoderPipeline> decoder;
    std::vector<AddedToken> added_tokens;
  };

  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Create(Parts parts);

  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const override;
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const override;
  int vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int32_t TokenId(std::string_view token) const override;
  bool IsSpecial(int32_t id) const override;
  std::unique_ptr<DecodeStream> NewDecodeStream(bool skip_special_tokens) const override;

  // The string Decode feeds to the decoder for `id`, or nullptr when it is skipped.
  const std::string* DecodeToken(int32_t id, bool skip_special_tokens) const;
  const DecoderPipeline& decoder() const { return *parts_.decoder; }

 private:
  explicit HfTokenizer(Parts parts);
  void EncodeStretch(std::string_view text, bool at_start, std::vector<int32_t>* ids) const;
  int32_t FindSpecialByName(std::initializer_list<std::string_view> names) const;

  Parts parts_;
  AddedVocabulary added_;
  int vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
};

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_HF_TOKENIZER_H_
