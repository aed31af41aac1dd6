// PayloadPrefix: the payload of the first n tokens of a longer payload, so that the prefill
// daemon's shared-prefix cache can serve a request whose prompt shares only the start of a
// cached prompt (vLLM-style block-granular prefix reuse). Every block of every mode is a
// [T, cols] matrix with one row per token (wire_format.h), so the prefix keeps the first n
// rows of each block. Row-wise encodings (F16, Int8Row) are sliced exactly; KIVI blocks
// (statistics shared across a group of tokens) are decoded, sliced and re-encoded, which adds
// at most one more quantisation step to the last partial group.
#ifndef SCD_COMMON_SCD_PAYLOAD_PREFIX_H_
#define SCD_COMMON_SCD_PAYLOAD_PREFIX_H_

#include "absl/status/statusor.h"
#include "common/scd/wire_format.h"

namespace scd {

// InvalidArgument unless 1 <= num_tokens <= payload.token_ids.size().
absl::StatusOr<Payload> PayloadPrefix(const Payload& payload, int num_tokens);

}  // namespace scd

#endif  // SCD_COMMON_SCD_PAYLOAD_PREFIX_H_
