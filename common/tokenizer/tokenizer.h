// Tokenizer: Hugging Face tokenizer.json, for the two BPE families our checkpoints use.
//   - SentencePiece-style BPE with byte fallback (Llama-2, Mistral, the stories260K
//     fixtures): normalizer prepends U+2581 and maps ' ' to U+2581; unknown characters fall
//     back to <0xNN> byte tokens; the decoder undoes both and strips the leading space.
//   - Byte-level BPE with a regex pre-tokenizer (GPT-2, Qwen2, Llama-3): bytes are mapped to
//     printable code points (GPT-2's bytes_to_unicode) before merging.
// Merges are applied by rank (lowest rank first), as HF's BPE model does. Added/special tokens
// are matched verbatim before the model runs. The post-processor (TemplateProcessing) adds
// BOS when the file says so.
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

  // Parses tokenizer.json text / reads a file. Unsupported model or pre-tokenizer types are
  // errors that name the type.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json_text);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);

  // Text to ids. With add_special_tokens, applies the post-processor (e.g. BOS first).
  virtual std::vector<int32_t> Encode(std::string_view text,
                                      bool add_special_tokens = true) const = 0;
  // Ids to text. Special tokens are skipped when skip_special_tokens.
  virtual std::string Decode(absl::Span<const int32_t> ids,
                             bool skip_special_tokens = true) const = 0;

  virtual int vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the tokenizer has none
  virtual int32_t eos_id() const = 0;  // -1 when the tokenizer has none
  // Id of an exact token string, or -1.
  virtual int32_t TokenId(std::string_view token) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
};

// Incremental detokenizer for streaming: feed ids one at a time and get back only complete
// UTF-8 text; never emits half a character, and applies the decoder's leading-space rule
// once per stream. The concatenation of all Push() results plus Flush() equals
// tokenizer.Decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);
  // Text that became final with this id (may be empty).
  std::string Push(int32_t id);
  // Whatever remains (an incomplete UTF-8 tail is emitted as U+FFFD per byte, as HF does).
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t emitted_bytes_ = 0;  // bytes of Decode(ids_) already returned
};

}  // namespace scd

#endif  // SCD_COMMON_TOKENIZER_TOKENIZER_H_
