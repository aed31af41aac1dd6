// See payload_chunks.h.
#include "common/serving/payload_chunks.h"

#include <algorithm>

#include "common/base/status_macros.h"
#include "common/scd/payload_rows.h"

namespace scd {

PayloadChunks::PayloadChunks(Payload payload) : payload_(std::move(payload)) {
  if (payload_.mode == CodecMode::kOracle) {
    payload_ = Payload{};
    return;
  }
  rows_ = payload_.token_ids.size();
  granularity_ = PayloadRowGranularity(payload_);
}

absl::StatusOr<size_t> PayloadChunks::Advance(const ConsumerCodec& codec, Backend& backend,
                                              Sequence& seq, size_t max_rows) {
  const size_t left = remaining();
  if (left == 0) return 0;
  size_t n = std::max(max_rows / granularity_, size_t{1}) * granularity_;
  n = std::min(n, left);
  if (n == rows_) {  // the whole payload in one piece: no copy
    SCD_RETURN_IF_ERROR(codec.Rebuild(payload_, backend, seq));
  } else {
    SCD_ASSIGN_OR_RETURN(const Payload chunk, PayloadRows(payload_, rebuilt_, rebuilt_ + n));
    SCD_RETURN_IF_ERROR(codec.Rebuild(chunk, backend, seq));
  }
  rebuilt_ += n;
  if (remaining() == 0) payload_ = Payload{};
  return n;
}

}  // namespace scd
