// Tokenizer: Hugging Face tokenizer.json, for the two BPE families our checkpoints use.
//   - SentencePiece-style BPE with byte fallback (Llama-2, Mistral, the stories260K
//     fixtures): normalizer prepends U+2581 and maps ' ' to U+2581; unknown characters fall
//     back to <0xNN> byte tokens; the decoder undoes both and strips the leading space.
//   - Byte-level BPE with a regex pre-tokenizer (GPT-2, Qwen2, Llama-3): bytes are mapped to
//     printable code points (GPT-2's bytes_to_unicode) before merging.
// Merges are applied by rank (lowest rank first), as HF's BPE model does. Added/special tokens
// are matched verbatim before the model runs. The post-processor (TemplateProcessing) adds
// BOS when the file says so. Decoding follows the file's decoder chain; Decode and
// StreamDecoder share one incremental implementation, so streaming output always concatenates
// to Decode's. All const methods are thread-safe. Implementation: common/tokenizer/*.cc
// (hf_tokenizer.cc is the pipeline).
#ifndef SCD_COMMON_TOKENIZER_TOKENIZER_H_
#define SCD_COMMON_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace scd {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Parses tokenizer.json text / reads a file. Malformed JSON, wrong field types and
  // unsupported model / normalizer / pre-tokenizer / decoder types or regexes are
  // InvalidArgumentErrors that name the field or type (a missing file is NotFoundError).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);

  // Text to ids. With add_special_tokens, applies the post-processor (e.g. BOS first).
  virtual std::vector<int32_t> Encode(std::string_view text,
                                      bool add_special_tokens = true) const = 0;
  // Ids to text. Special tokens are skipped when skip_special_tokens; ids outside the
  // vocabulary are skipped. Ill-formed UTF-8 from byte tokens becomes U+FFFD, as in HF.
  virtual std::string Decode(absl::Span<const int32_t> ids,
                             bool skip_special_tokens = true) const = 0;

  // One more than the largest id of the model vocabulary and the added tokens (the number of
  // embedding rows the ids address).
  virtual int vocab_size() const = 0;
  // BOS: the first special token of the post-processor's single template when it starts with
  // one (Llama's <s>, Llama-3's <|begin_of_text|>); otherwise the first of "<s>",
  // "<|begin_of_text|>", "<bos>", "<|startoftext|>" that exists. EOS: the special token ending
  // that template when there is one; otherwise the first of "</s>", "<|end_of_text|>",
  // "<|endoftext|>", "<|im_end|>", "<eos>", "<|eot_id|>" that exists. These are base-model
  // conventions; chat stop tokens (e.g. Llama-3's <|eot_id|>) are the caller's business.
  virtual int32_t bos_id() const = 0;  // -1 when the tokenizer has none
  virtual int32_t eos_id() const = 0;  // -1 when the tokenizer has none
  // Id of an exact token string, or -1.
  virtual int32_t TokenId(std::string_view token) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;

  // Incremental decoding state behind StreamDecoder. Push returns the text that became final
  // with `id`; Flush returns the rest and ends the stream.
  class DecodeStream {
   public:
    virtual ~DecodeStream() = default;
    virtual std::string Push(int32_t id) = 0;
    virtual std::string Flush() = 0;
  };
  // Tokenizers from FromJson return an exact incremental decoder. The default, for other
  // implementations, re-decodes all ids on each Push and holds back a trailing U+FFFD (a
  // character that may still be incomplete); it is exact whenever Decode of a prefix is a
  // prefix of Decode of the whole apart from such a tail.
  virtual std::unique_ptr<DecodeStream> NewDecodeStream(bool skip_special_tokens) const;
};

// Incremental detokenizer for streaming: feed ids one at a time and get back only complete
// UTF-8 text; never emits half a character, and applies the decoder's leading-space rule
// once per stream. The concatenation of all Push() results plus Flush() equals
// tokenizer.Decode(all ids). Text is held back only while a later id could still change it:
// a run of byte-fallback tokens until a non-byte token ends it (HF turns a whole run that is
// not valid UTF-8 into U+FFFD per byte), a byte-level partial character until its last byte.
// The tokenizer must outlive the decoder. Not thread-safe; use one per stream.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);
  // Text that became final with this id (may be empty).
  std::string Push(int32_t id);
  // Whatever remains (held bytes that never completed a character become U+FFFD, as in
  // Decode). The decoder then starts a new stream.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::unique_ptr<Tokenizer::DecodeStream> stream_;
};

}  // namespace scd

#endif  // SCD_COMMON_TOKENIZER_TOKENIZER_H_
