// The tokenizer.json "decoder", run incrementally. HF decoders map the list of token strings
// to a list of strings which are then concatenated; we run the same chain one token at a time
// so that Decode() and StreamDecoder share one implementation and agree by construction.
// The chain is normalised into three stages:
//   token steps   whole-token rewrites before the first joining step: Replace, ByteFallback
//                 (runs of <0xNN> tokens become their UTF-8 text, or one U+FFFD per byte when
//                 the run is not valid UTF-8 as a whole), Metaspace (first token loses its
//                 "▁", others turn it into ' '), Strip (per token);
//   join          Fuse (concatenate), ByteLevel (map characters back through bytes_to_unicode
//                 and decode the bytes lossily: one U+FFFD per ill-formed subpart), none (plain
//                 concatenation), or no decoder at all (HF joins with ' ');
//   string steps  rewrites of the one joined string: Strip (e.g. the leading space that the
//                 SentencePiece prefix left), Replace, Metaspace, Fuse (no-op).
// Output is emitted as soon as no later token can change it: a byte run is held until a
// non-byte token ends it, a truncated UTF-8 tail until its bytes arrive, a trailing Strip
// candidate until something follows it. Unsupported types are errors naming the type.
#ifndef SCD_COMMON_TOKENIZER_DECODER_H_
#define SCD_COMMON_TOKENIZER_DECODER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/json_fields.h"
#include "common/tokenizer/unicode.h"

namespace scd::tokenizer_internal {

class DecoderPipeline {
 public:
  // `json` may be null: no decoder (tokens joined with ' ').
  static absl::StatusOr<std::unique_ptr<DecoderPipeline>> FromJson(const Json* json,
                                                                   std::string_view path);

  class State;
  // A fresh decoding state; the pipeline must outlive it.
  State NewState() const;

 private:
  friend class State;
  enum class Kind { kReplace, kByteFallback, kMetaspace, kStrip, kFuse, kByteLevel };
  enum class Join { kNone, kFuse, kByteLevel, kSpaces };
  struct Step {
    Kind kind;
    std::string pattern;      // kReplace
    std::string content;      // kReplace
    char32_t character = 0;   // kMetaspace: the replacement; kStrip: the content
    bool drop_first = false;  // kMetaspace: prepend_scheme != never
    int start = 0;            // kStrip
    int stop = 0;             // kStrip
  };

  DecoderPipeline() = default;
  absl::Status Add(const Json& json, std::string_view path);

  std::vector<Step> token_steps_;
  Join join_ = Join::kNone;
  std::vector<Step> string_steps_;
};

class DecoderPipeline::State {
 public:
  // Appends to `out` the text that became final with `token`.
  void PushToken(std::string_view token, std::string* out);
  // Appends everything still held; the state is then spent.
  void Flush(std::string* out);

 private:
  friend class DecoderPipeline;
  struct TokenStepState {
    std::string run_bytes;  // kByteFallback: the pending run
    int64_t count = 0;      // kMetaspace: tokens seen
  };
  struct StringStepState {
    int lead_left = 0;  // kStrip: leading characters still strippable
    int held_count = 0;
    std::string held;  // kStrip: trailing content characters; kReplace: pattern prefix
  };

  explicit State(const DecoderPipeline* pipeline);
  // Runs token steps first.. on one token, then the join and the string steps.
  void RunTokenSteps(size_t first, std::string token, std::string* out);
  // Ends the byte run held by ByteFallback step i, passing its text on to step i + 1.
  void FlushByteRun(size_t i, std::string* out);
  void Join(std::string_view token, std::string* out);
  void RunStringSteps(size_t first, std::string text, std::string* out);
  std::string ApplyStringStep(size_t i, std::string_view text);
  std::string FlushStringStep(size_t i);

  const DecoderPipeline* pipeline_;
  std::vector<TokenStepState> token_states_;
  std::vector<StringStepState> string_states_;
  Utf8LossyStream byte_level_;
  bool first_token_ = true;  // kSpaces join
};

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_DECODER_H_
