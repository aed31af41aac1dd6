// See payload_checks.h.
#include "common/scd/payload_checks.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace scd {

absl::Status ExpectBlockCols(const PayloadBlock* b, int cols, std::string_view what, int layer,
                             std::string_view mode) {
  if (b == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(mode), " payload lacks the ",
                                                   std::string(what), " block of layer ", layer));
  }
  if (static_cast<int>(b->cols) != cols) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(mode), " payload's ",
                                                   std::string(what), " block of layer ", layer,
                                                   " has ", b->cols, " columns, expected ", cols));
  }
  return absl::OkStatus();
}

absl::StatusOr<const PatchAligner*> PatchAlignerFor(const Payload& p, const PayloadBlock* pb,
                                                    int layer, const ScdArtifact* artifact) {
  if (p.mode != CodecMode::kScd) {
    return absl::InvalidArgumentError("PATCH block in a payload whose mode is not scd");
  }
  if (artifact == nullptr || artifact->patches.count(layer) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload patches layer ", layer, ", which this artifact has no aligner for"));
  }
  const PatchAligner& aligner = artifact->patches.at(layer).aligner;
  absl::Status cols = ExpectBlockCols(pb, aligner.code_dim, "patch", layer, CodecModeName(p.mode));
  if (!cols.ok()) return cols;
  return &aligner;
}

}  // namespace scd
