// Checks of a payload's blocks shared by the consumer's two rebuilds, on the host
// (ConsumerCodec::Rebuild, codec.cc) and on the GPU (gpu_rebuild.cc), so that both refuse a
// payload that does not fit the pair with the same INVALID_ARGUMENT.
#ifndef SCD_COMMON_SCD_PAYLOAD_CHECKS_H_
#define SCD_COMMON_SCD_PAYLOAD_CHECKS_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/scd/artifact.h"
#include "common/scd/wire_format.h"

namespace scd {

// `b` is present and has `cols` columns; `what` names it in the error ("key code", ...).
absl::Status ExpectBlockCols(const PayloadBlock* b, int cols, std::string_view what, int layer,
                             std::string_view mode);

// The aligner that decodes `pb`, the PATCH block of `layer`: the payload's mode is scd, the
// artifact (may be null) has an aligner for the layer, and the block has its code_dim columns.
absl::StatusOr<const PatchAligner*> PatchAlignerFor(const Payload& p, const PayloadBlock* pb,
                                                    int layer, const ScdArtifact* artifact);

}  // namespace scd

#endif  // SCD_COMMON_SCD_PAYLOAD_CHECKS_H_
