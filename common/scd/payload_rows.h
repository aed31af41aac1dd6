// PayloadRows: some of a payload's token rows as a payload of their own, byte for byte, so that
// the decode engine can rebuild a long payload a chunk of rows at a time between the running
// requests' decode steps (DecodeEngineOptions::rebuild_chunk). Every block of every mode is a
// [T, cols] matrix with one row per token (wire_format.h), and each encoding's bytes split by
// rows: F32, F16 and int8-row at any row; KIVI keys (one scale and zero per channel per group
// of `group` tokens) at multiples of their group; int4 codes (two per byte) where the row
// starts on a byte. The slice decodes to exactly the rows the whole payload decodes to, so a
// payload rebuilt in slices equals the payload rebuilt whole. (PayloadPrefix, which may cut
// anywhere, re-encodes KIVI blocks instead.)
#ifndef SCD_COMMON_SCD_PAYLOAD_ROWS_H_
#define SCD_COMMON_SCD_PAYLOAD_ROWS_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "common/scd/wire_format.h"

namespace scd {

// The smallest row count at which every block of `payload` slices exactly; at most the
// payload's token count (a payload whose blocks only slice coarser is one slice).
size_t PayloadRowGranularity(const Payload& payload);

// Rows [begin, end) of `payload` as a payload starting at start_position + begin. `begin` must
// be a multiple of PayloadRowGranularity, and `end` one too or the payload's end; every block
// must have one row per token and its encoding's size (as ParsePayload leaves them).
absl::StatusOr<Payload> PayloadRows(const Payload& payload, size_t begin, size_t end);
// The same into *out, whose buffers are reused (a loop over a payload's slices allocates once).
absl::Status PayloadRowsInto(const Payload& payload, size_t begin, size_t end, Payload* out);

}  // namespace scd

#endif  // SCD_COMMON_SCD_PAYLOAD_ROWS_H_
