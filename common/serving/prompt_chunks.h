// PromptChunks: the prompt tokens a decode request still has to prefill itself (an oracle
// payload's, then the suffix), taken a chunk at a time (DecodeEngineOptions::prefill_chunk). A
// chunk never spans the payload's end, so that the payload's prefill and the suffix's are timed
// apart. Shared by the decode engine's plain path and SekvPrefill.
#ifndef SCD_COMMON_SERVING_PROMPT_CHUNKS_H_
#define SCD_COMMON_SERVING_PROMPT_CHUNKS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace scd {

struct PromptChunks {
  std::vector<int32_t> tokens;  // [0, payload_end) an oracle payload's, then the suffix's
  size_t payload_end = 0;
  size_t prefilled = 0;

  size_t remaining() const { return tokens.size() - prefilled; }
  bool in_payload() const { return prefilled < payload_end; }
  // The next chunk: at most `budget` tokens, not across the payload's end.
  absl::Span<const int32_t> Next(size_t budget) const {
    const size_t end = in_payload() ? payload_end : tokens.size();
    return absl::MakeConstSpan(tokens).subspan(prefilled, std::min(budget, end - prefilled));
  }
};

}  // namespace scd

#endif  // SCD_COMMON_SERVING_PROMPT_CHUNKS_H_
