// The tokenizer.json "post_processor", reduced to what single-sequence encoding needs: the
// special-token ids placed before and after the sequence. Supported: TemplateProcessing (its
// "single" template, e.g. [<s>, $A] for Llama), RobertaProcessing and BertProcessing
// ([cls, $A, sep]), ByteLevel (offsets only: no ids), and Sequence of these. null adds nothing.
#ifndef SCD_COMMON_TOKENIZER_POST_PROCESSOR_H_
#define SCD_COMMON_TOKENIZER_POST_PROCESSOR_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/json_fields.h"

namespace scd::tokenizer_internal {

class PostProcessor {
 public:
  // `json` may be null (no post-processor).
  static absl::StatusOr<PostProcessor> FromJson(const Json* json, std::string_view path);

  // prefix + ids + suffix.
  std::vector<int32_t> Apply(std::vector<int32_t> ids) const;

  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  absl::Status Add(const Json& json, std::string_view path);

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_POST_PROCESSOR_H_
