// SharedArtifact: the calibration artifacts of several consumers of one producer on one shared
// basis (shared_basis.h), in one file: the basis's encoders once, and a section per consumer
// with its decoders, PATCH aligners, patch selection, recompute block and quality record.
//
// File: safetensors. A consumer's tensors keep their standalone names (artifact.cc) under a
// prefix: the producer-side ones (`*.mu_in`, `*.encoder`, the same in every section) under
// `basis.`, the rest under `c<i>.` for section i. Metadata "scd_shared": {"format_version",
// "basis": {"id", "kind"}, "sections": [{"section": "c<i>", "scd": <that consumer's standalone
// metadata>}]}. A consumer read back from it is the ScdArtifact its standalone file would
// give, id included (the digest of its standalone tensors), so that its pair digest is the
// same either way.
#ifndef SCD_COMMON_SCD_SHARED_ARTIFACT_H_
#define SCD_COMMON_SCD_SHARED_ARTIFACT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/scd/artifact.h"

namespace scd {

class SharedArtifact {
 public:
  // Adds consumer `a`'s section, or replaces the section of the same consumer. INVALID_ARGUMENT
  // unless `a` is on this file's basis (its basis id, producer and encoders: the first section
  // sets them).
  absl::Status Add(ScdArtifact a);

  const std::vector<ScdArtifact>& consumers() const { return consumers_; }
  const std::string& basis_id() const;
  // The section of the consumer with model digest `consumer_digest`; NOT_FOUND naming the
  // consumers the file holds.
  absl::StatusOr<ScdArtifact> ForConsumer(const std::string& consumer_digest) const;

  // Writes the file (FAILED_PRECONDITION with no section); sets each section's id.
  absl::Status Save(const std::string& path);
  static absl::StatusOr<SharedArtifact> Load(const std::string& path);
  // Whether `path` is a shared artifact file (false for a standalone one, or no file).
  static bool IsSharedFile(const std::string& path);

 private:
  std::vector<ScdArtifact> consumers_;
};

// The artifact at `path` for consumer `consumer_digest`: a standalone artifact as it is (its
// pair checked by the caller), or that consumer's section of a shared one (NOT_FOUND without).
absl::StatusOr<ScdArtifact> LoadArtifactFor(const std::string& path,
                                            const std::string& consumer_digest);

}  // namespace scd

#endif  // SCD_COMMON_SCD_SHARED_ARTIFACT_H_
