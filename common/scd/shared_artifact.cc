// See shared_artifact.h.
#include "common/scd/shared_artifact.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/model/safetensors.h"
#include "common/scd/artifact_io.h"

namespace scd {
namespace {

constexpr int kSharedFormatVersion = 1;
constexpr char kMetadataKey[] = "scd_shared";

// Producer-side tensors, the same in every section of one basis.
bool IsBasisTensor(const std::string& name) {
  return absl::EndsWith(name, ".mu_in") || absl::EndsWith(name, ".encoder");
}

std::string SectionName(size_t i) { return absl::StrCat("c", i); }

std::string StoredName(const std::string& name, const std::string& section) {
  return absl::StrCat(IsBasisTensor(name) ? "basis" : section, ".", name);
}

// Whether two codes read the producer alike: the same μ_in and encoder.
bool SameEncoder(const LinearCode& a, const LinearCode& b) {
  return a.rank == b.rank && a.mu_in == b.mu_in && a.encoder == b.encoder;
}

// The producer-side codes of `a` against those of `b`: every REUSE layer's, and the PATCH
// codes of the layers both have.
bool SameEncoders(const ScdArtifact& a, const ScdArtifact& b) {
  if (a.reuse.size() != b.reuse.size()) return false;
  for (size_t l = 0; l < a.reuse.size(); ++l) {
    if (!SameEncoder(a.reuse[l].key, b.reuse[l].key) ||
        !SameEncoder(a.reuse[l].value, b.reuse[l].value)) {
      return false;
    }
  }
  for (const auto& [l, patch] : a.patches) {
    auto it = b.patches.find(l);
    if (it != b.patches.end() && !SameEncoder(patch.code, it->second.code)) return false;
  }
  return true;
}

}  // namespace

const std::string& SharedArtifact::basis_id() const {
  static const std::string kNone;
  return consumers_.empty() ? kNone : consumers_[0].basis_id;
}

absl::Status SharedArtifact::Add(ScdArtifact a) {
  if (a.basis_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the artifact of consumer '", a.consumer_name,
                     "' is a pair's own code, not on a shared basis"));
  }
  if (!consumers_.empty()) {
    const ScdArtifact& first = consumers_[0];
    if (a.basis_id != first.basis_id || a.producer_digest != first.producer_digest ||
        !SameEncoders(a, first)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the artifact of consumer '", a.consumer_name, "' is on basis ", a.basis_id.substr(0, 12),
          ", not on this file's basis ", first.basis_id.substr(0, 12)));
    }
  }
  for (ScdArtifact& c : consumers_) {
    if (c.consumer_digest == a.consumer_digest) {
      c = std::move(a);
      return absl::OkStatus();
    }
  }
  consumers_.push_back(std::move(a));
  return absl::OkStatus();
}

absl::StatusOr<ScdArtifact> SharedArtifact::ForConsumer(const std::string& consumer_digest) const {
  std::string held;
  for (const ScdArtifact& c : consumers_) {
    if (c.consumer_digest == consumer_digest) return c;
    absl::StrAppend(&held, held.empty() ? "" : ", ", "'", c.consumer_name, "' (",
                    c.consumer_digest.substr(0, 12), ")");
  }
  return absl::NotFoundError(absl::StrCat("the shared artifact has no section for consumer digest ",
                                          consumer_digest.substr(0, 12), "; it holds ", held));
}

absl::Status SharedArtifact::Save(const std::string& path) {
  if (consumers_.empty())
    return absl::FailedPreconditionError("a shared artifact needs a consumer");
  TensorMap stored;
  nlohmann::json sections = nlohmann::json::array();
  for (size_t i = 0; i < consumers_.size(); ++i) {
    nlohmann::json meta;
    const TensorMap m = ArtifactTensors(consumers_[i], &meta);
    const std::string section = SectionName(i);
    for (const auto& [name, t] : m) {
      auto [it, added] = stored.emplace(StoredName(name, section), t);
      if (!added && it->second.bytes != t.bytes) {
        return absl::InvalidArgumentError(absl::StrCat("consumer '", consumers_[i].consumer_name,
                                                       "' has other encoders than the basis (",
                                                       name, ")"));
      }
    }
    consumers_[i].id = TensorDigest(m);
    sections.push_back({{"section", section}, {"scd", meta}});
  }
  const nlohmann::json meta = {
      {"format_version", kSharedFormatVersion},
      {"basis", {{"id", consumers_[0].basis_id}, {"kind", consumers_[0].basis_kind}}},
      {"sections", sections}};
  return WriteSafetensors(path, stored, {{kMetadataKey, meta.dump()}});
}

absl::StatusOr<SharedArtifact> SharedArtifact::Load(const std::string& path) {
  SCD_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  auto it = file->metadata().find(kMetadataKey);
  if (it == file->metadata().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a shared SCD artifact (no \"", kMetadataKey, "\" metadata)"));
  }
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(it->second);
    if (meta.at("format_version").get<int>() != kSharedFormatVersion) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": shared artifact format version ",
                                                     meta.at("format_version").dump(), " is not ",
                                                     kSharedFormatVersion));
    }
    meta.at("sections").at(0);  // at least one
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad shared artifact metadata: ", e.what()));
  }
  SharedArtifact shared;
  const SafetensorsFile& f = *file;
  for (const nlohmann::json& s : meta["sections"]) {
    std::string section, scd_meta;
    try {
      section = s.at("section").get<std::string>();
      scd_meta = s.at("scd").dump();
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": bad shared artifact section: ", e.what()));
    }
    const TensorReader read = [&f, &section](const std::string& name,
                                             absl::Span<const int64_t> shape) {
      return f.ReadAsFloat(StoredName(name, section), shape);
    };
    SCD_ASSIGN_OR_RETURN(ScdArtifact a,
                         ArtifactFromParts(absl::StrCat(path, " [", section, "]"), scd_meta, read));
    a.id = TensorDigest(ArtifactTensors(a));
    SCD_RETURN_IF_ERROR(shared.Add(std::move(a)));
  }
  return shared;
}

bool SharedArtifact::IsSharedFile(const std::string& path) {
  auto file = SafetensorsFile::Open(path);
  return file.ok() && (*file)->metadata().count(kMetadataKey) > 0;
}

absl::StatusOr<ScdArtifact> LoadArtifactFor(const std::string& path,
                                            const std::string& consumer_digest) {
  if (!SharedArtifact::IsSharedFile(path)) return ScdArtifact::Load(path);
  SCD_ASSIGN_OR_RETURN(SharedArtifact shared, SharedArtifact::Load(path));
  absl::StatusOr<ScdArtifact> a = shared.ForConsumer(consumer_digest);
  if (!a.ok())
    return absl::Status(a.status().code(), absl::StrCat(path, ": ", a.status().message()));
  return a;
}

}  // namespace scd
