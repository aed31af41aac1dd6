// The pieces of an ScdArtifact's file format (artifact.cc) that other containers of artifacts
// reuse (shared_artifact.h): the tensors and metadata of one artifact under their standalone
// names, their digest (the artifact id), and an artifact read back through any name → tensor
// reader.
#ifndef SCD_COMMON_SCD_ARTIFACT_IO_H_
#define SCD_COMMON_SCD_ARTIFACT_IO_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/safetensors.h"
#include "common/scd/artifact.h"

namespace scd {

using TensorMap = std::map<std::string, SafetensorsTensor>;
// Reads tensor `name` as floats, checking its shape.
using TensorReader = std::function<absl::StatusOr<std::vector<float>>(
    const std::string& name, absl::Span<const int64_t> shape)>;

// `a`'s tensors (names in artifact.cc) and, when asked, its "scd" metadata.
TensorMap ArtifactTensors(const ScdArtifact& a, nlohmann::json* meta = nullptr);
// The artifact id of these tensors: SHA-256 (hex) over each name and its bytes, in name order.
std::string TensorDigest(const TensorMap& m);
// An artifact from its metadata text and its tensors (`path` names it in errors); id unset.
absl::StatusOr<ScdArtifact> ArtifactFromParts(const std::string& path, const std::string& meta_text,
                                              const TensorReader& read);

}  // namespace scd

#endif  // SCD_COMMON_SCD_ARTIFACT_IO_H_
