// PayloadChunks: the rows of a decode request's payload still to rebuild into its sequence,
// rebuilt a chunk at a time (DecodeEngineOptions::rebuild_chunk), so that a long payload's
// rebuild never stalls the running streams for its whole length, as PromptChunks does for the
// tokens a request prefills itself. A chunk is the payload's rows cut byte for byte
// (PayloadRows), so the chunks rebuild what the whole payload rebuilds, through the same
// ConsumerCodec::Rebuild (its checks, and its GPU path on a CUDA backend). Recompute payloads
// chunk too: each chunk's recomputed block attends to the earlier chunks' rows in the cache.
// Shared by the decode engine's plain path and SekvPrefill.
#ifndef SCD_COMMON_SERVING_PAYLOAD_CHUNKS_H_
#define SCD_COMMON_SERVING_PAYLOAD_CHUNKS_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "common/runtime/backend.h"
#include "common/scd/codec.h"
#include "common/scd/wire_format.h"

namespace scd {

class PayloadChunks {
 public:
  PayloadChunks() = default;  // nothing to rebuild
  // An oracle payload has no rows to rebuild (its tokens are prefilled: PromptChunks).
  explicit PayloadChunks(Payload payload);

  size_t remaining() const { return rows_ - rebuilt_; }
  // Rows per chunk are a multiple of this (PayloadRowGranularity), but for the last.
  size_t granularity() const { return granularity_; }

  // Rebuilds the next rows into `seq` (which must hold the rows before them) through `codec`
  // on `backend`: `max_rows` rounded down to the granularity, but at least one step, and at
  // most what remains. Returns the rows rebuilt; the payload is freed after the last.
  absl::StatusOr<size_t> Advance(const ConsumerCodec& codec, Backend& backend, Sequence& seq,
                                 size_t max_rows);

 private:
  Payload payload_;
  size_t rows_ = 0, granularity_ = 1, rebuilt_ = 0;
};

}  // namespace scd

#endif  // SCD_COMMON_SERVING_PAYLOAD_CHUNKS_H_
