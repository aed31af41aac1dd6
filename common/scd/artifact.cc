// See artifact.h. Tensor names: reuse.<l>.{k,v}.{mu_in,encoder,decoder,mu_out},
// patch.<l>.code.{mu_in,encoder,decoder,mu_out}, patch.<l>.aligner.{a,c,w1,b1,w2,b2}.
#include "common/scd/artifact.h"

#include <climits>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "common/base/sha256.h"
#include "common/base/status_macros.h"
#include "common/model/safetensors.h"
#include "common/scd/artifact_io.h"

namespace scd {
namespace {

constexpr int kFormatVersion = 1;

void PutVec(TensorMap& m, const std::string& name, const std::vector<float>& v,
            std::vector<int64_t> shape) {
  m[name] = SafetensorsTensor::FromFloats(DType::kF32, std::move(shape), v);
}

void PutCode(TensorMap& m, const std::string& prefix, const LinearCode& c) {
  PutVec(m, prefix + ".mu_in", c.mu_in, {c.in_dim});
  PutVec(m, prefix + ".encoder", c.encoder, {c.in_dim, c.rank});
  PutVec(m, prefix + ".decoder", c.decoder, {c.rank, c.out_dim});
  PutVec(m, prefix + ".mu_out", c.mu_out, {c.out_dim});
}

absl::Status GetVec(const TensorReader& f, const std::string& name, std::vector<int64_t> shape,
                    std::vector<float>* out) {
  SCD_ASSIGN_OR_RETURN(*out, f(name, shape));
  return absl::OkStatus();
}

absl::Status GetCode(const TensorReader& f, const std::string& prefix, int in, int rank, int out,
                     LinearCode* c) {
  c->in_dim = in;
  c->rank = rank;
  c->out_dim = out;
  SCD_RETURN_IF_ERROR(GetVec(f, prefix + ".mu_in", {in}, &c->mu_in));
  SCD_RETURN_IF_ERROR(GetVec(f, prefix + ".encoder", {in, rank}, &c->encoder));
  SCD_RETURN_IF_ERROR(GetVec(f, prefix + ".decoder", {rank, out}, &c->decoder));
  SCD_RETURN_IF_ERROR(GetVec(f, prefix + ".mu_out", {out}, &c->mu_out));
  return absl::OkStatus();
}

// An integer metadata field. The implicit json -> int conversion truncates a float, and is
// undefined for one out of int's range (1e30); a malformed artifact must be an error instead.
int MetaInt(const nlohmann::json& v) {
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t{INT_MAX}
                              : v.get<int64_t>() < INT_MIN || v.get<int64_t>() > INT_MAX)) {
    throw std::out_of_range("expected an integer in int range, got " + v.dump());
  }
  return static_cast<int>(v.get<int64_t>());
}

}  // namespace

std::string TensorDigest(const TensorMap& m) {
  Sha256 h;
  for (const auto& [name, t] : m) {
    h.Update(name);
    h.Update(t.bytes);
  }
  return Sha256::ToHex(h.Finish());
}

namespace {

// The status for an exception thrown while reading `path`'s metadata (json errors, MetaInt,
// std::stoi of a patch layer key).
absl::Status BadMetadata(const std::string& path, const std::exception& e) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": bad artifact metadata: ", e.what()));
}

// Parses the "scd" metadata into `a`'s scalar fields and checks that they agree; returns the
// parsed JSON for the patch step.
absl::StatusOr<nlohmann::json> ParseMetadata(const std::string& path, const std::string& text,
                                             ScdArtifact& a) {
  try {
    nlohmann::json meta = nlohmann::json::parse(text);
    if (meta.at("format_version").get<int>() != kFormatVersion) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": artifact format version ",
                                                     meta.at("format_version").dump(), " is not ",
                                                     kFormatVersion));
    }
    a.producer_name = meta.at("producer").at("name");
    a.producer_digest = meta.at("producer").at("digest");
    a.consumer_name = meta.at("consumer").at("name");
    a.consumer_digest = meta.at("consumer").at("digest");
    a.num_layers = MetaInt(meta.at("num_layers"));
    a.hidden_size = MetaInt(meta.at("hidden_size"));
    a.kv_dim = MetaInt(meta.at("kv_dim"));
    a.rank_k = MetaInt(meta.at("rank_k"));
    a.rank_v = MetaInt(meta.at("rank_v"));
    a.rank_h = MetaInt(meta.at("rank_h"));
    const int code_encoding = MetaInt(meta.at("code_encoding"));
    if (code_encoding < 0 || code_encoding > 255) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad code_encoding"));
    }
    SCD_ASSIGN_OR_RETURN(a.code_encoding, EncodingFromByte(static_cast<uint8_t>(code_encoding)));
    for (const nlohmann::json& l : meta.at("patch_order")) a.patch_order.push_back(MetaInt(l));
    a.patch_budget = MetaInt(meta.at("patch_budget"));
    a.recompute_first = MetaInt(meta.at("recompute_block").at(0));
    a.recompute_end = MetaInt(meta.at("recompute_block").at(1));
    a.report = meta.at("report");
    if (meta.contains("basis")) {
      a.basis_id = meta["basis"].at("id").get<std::string>();
      a.basis_kind = meta["basis"].at("kind").get<std::string>();
    }
    if (a.num_layers <= 0 || a.hidden_size <= 0 || a.kv_dim <= 0 || a.rank_k <= 0 ||
        a.rank_v <= 0 || a.rank_k > a.kv_dim || a.rank_v > a.kv_dim || a.rank_h < 0 ||
        a.rank_h > a.hidden_size || a.patch_budget < 0 ||
        a.patch_budget > static_cast<int>(a.patch_order.size()) ||
        !(0 <= a.recompute_first && a.recompute_first <= a.recompute_end &&
          a.recompute_end <= a.num_layers)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": inconsistent artifact metadata"));
    }
    if (meta.contains("quality")) {  // artifacts calibrated before the rate ladder have none
      absl::StatusOr<std::vector<QualityRecord>> quality = QualityRecordsFromJson(meta["quality"]);
      if (!quality.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": ", quality.status().message()));
      }
      const size_t rungs = RateLadder(a).size();
      for (const QualityRecord& r : *quality) {
        if (r.rung < 0 || static_cast<size_t>(r.rung) >= rungs) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": a quality record names rung ",
                                                         r.rung, " of a ", rungs, "-rung ladder"));
        }
      }
      a.quality = std::move(quality).value();
    }
    return meta;
  } catch (const std::exception& e) {
    return BadMetadata(path, e);
  }
}

// Reads every layer's REUSE codes into `a.reuse`.
absl::Status LoadReuseLayers(const std::string& path, const TensorReader& file, ScdArtifact& a) {
  try {
    // Layer by layer, so that a num_layers the file has no tensors for fails at the first
    // missing one instead of allocating num_layers entries up front.
    for (int l = 0; l < a.num_layers; ++l) {
      ReuseLayer layer;
      SCD_RETURN_IF_ERROR(
          GetCode(file, absl::StrCat("reuse.", l, ".k"), a.kv_dim, a.rank_k, a.kv_dim, &layer.key));
      SCD_RETURN_IF_ERROR(GetCode(file, absl::StrCat("reuse.", l, ".v"), a.kv_dim, a.rank_v,
                                  a.kv_dim, &layer.value));
      a.reuse.push_back(std::move(layer));
    }
  } catch (const std::exception& e) {
    return BadMetadata(path, e);
  }
  return absl::OkStatus();
}

// Reads the PATCH code and aligner of layer `l`: hidden size `d`, code rank `r`, aligner
// width `m` (0: affine only).
absl::Status LoadPatchLayer(const TensorReader& file, int l, int d, int r, int m, PatchLayer& p) {
  const std::string prefix = absl::StrCat("patch.", l);
  SCD_RETURN_IF_ERROR(GetCode(file, prefix + ".code", d, r, d, &p.code));
  p.aligner.code_dim = r;
  p.aligner.hidden_dim = m;
  p.aligner.out_dim = d;
  SCD_RETURN_IF_ERROR(GetVec(file, prefix + ".aligner.a", {r, d}, &p.aligner.a));
  SCD_RETURN_IF_ERROR(GetVec(file, prefix + ".aligner.c", {d}, &p.aligner.c));
  if (m > 0) {
    SCD_RETURN_IF_ERROR(GetVec(file, prefix + ".aligner.w1", {r, m}, &p.aligner.w1));
    SCD_RETURN_IF_ERROR(GetVec(file, prefix + ".aligner.b1", {m}, &p.aligner.b1));
    SCD_RETURN_IF_ERROR(GetVec(file, prefix + ".aligner.w2", {m, d}, &p.aligner.w2));
  }
  SCD_RETURN_IF_ERROR(GetVec(file, prefix + ".aligner.b2", {d}, &p.aligner.b2));
  return absl::OkStatus();
}

// Reads every PATCH layer listed in the metadata into `a.patches` and checks that the patch
// order names only layers that have one.
absl::Status LoadPatches(const std::string& path, const TensorReader& file,
                         const nlohmann::json& meta, ScdArtifact& a) {
  try {
    for (const auto& [key, hidden] : meta.at("patch_hidden").items()) {
      const int l = std::stoi(key);
      if (l < 0 || l >= a.num_layers) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": patch layer ", l, " out of range"));
      }
      PatchLayer p;
      const int m = MetaInt(hidden);
      if (m < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": patch layer ", l, " has width ", m));
      }
      SCD_RETURN_IF_ERROR(LoadPatchLayer(file, l, a.hidden_size, a.rank_h, m, p));
      a.patches[l] = std::move(p);
    }
    for (int l : a.patch_order) {
      if (!a.patches.count(l)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": patch order names layer ", l, " which has no PATCH fit"));
      }
    }
  } catch (const std::exception& e) {
    return BadMetadata(path, e);
  }
  return absl::OkStatus();
}

// The artifact id: the digest of every tensor in the file, recomputed exactly as Save did.
absl::StatusOr<std::string> LoadedTensorDigest(const SafetensorsFile& file) {
  TensorMap m;
  for (const std::string& name : file.TensorNames()) {
    SCD_ASSIGN_OR_RETURN(std::vector<float> v, file.ReadAsFloat(name));
    const TensorInfo* info = file.Find(name);
    m[name] = SafetensorsTensor::FromFloats(DType::kF32, info->shape, v);
  }
  return TensorDigest(m);
}

}  // namespace

absl::StatusOr<ScdArtifact> ArtifactFromParts(const std::string& path, const std::string& meta_text,
                                              const TensorReader& read) {
  ScdArtifact a;
  SCD_ASSIGN_OR_RETURN(const nlohmann::json meta, ParseMetadata(path, meta_text, a));
  SCD_RETURN_IF_ERROR(LoadReuseLayers(path, read, a));
  SCD_RETURN_IF_ERROR(LoadPatches(path, read, meta, a));
  return a;
}

TensorMap ArtifactTensors(const ScdArtifact& a, nlohmann::json* meta_out) {
  TensorMap m;
  for (int l = 0; l < static_cast<int>(a.reuse.size()); ++l) {
    PutCode(m, absl::StrCat("reuse.", l, ".k"), a.reuse[l].key);
    PutCode(m, absl::StrCat("reuse.", l, ".v"), a.reuse[l].value);
  }
  nlohmann::json patch_dims = nlohmann::json::object();
  for (const auto& [l, p] : a.patches) {
    const std::string prefix = absl::StrCat("patch.", l);
    PutCode(m, prefix + ".code", p.code);
    const PatchAligner& al = p.aligner;
    PutVec(m, prefix + ".aligner.a", al.a, {al.code_dim, al.out_dim});
    PutVec(m, prefix + ".aligner.c", al.c, {al.out_dim});
    if (al.hidden_dim > 0) {
      PutVec(m, prefix + ".aligner.w1", al.w1, {al.code_dim, al.hidden_dim});
      PutVec(m, prefix + ".aligner.b1", al.b1, {al.hidden_dim});
      PutVec(m, prefix + ".aligner.w2", al.w2, {al.hidden_dim, al.out_dim});
    }
    PutVec(m, prefix + ".aligner.b2", al.b2, {al.out_dim});
    patch_dims[std::to_string(l)] = al.hidden_dim;
  }
  nlohmann::json meta = {
      {"format_version", kFormatVersion},
      {"producer", {{"name", a.producer_name}, {"digest", a.producer_digest}}},
      {"consumer", {{"name", a.consumer_name}, {"digest", a.consumer_digest}}},
      {"num_layers", a.num_layers},
      {"hidden_size", a.hidden_size},
      {"kv_dim", a.kv_dim},
      {"rank_k", a.rank_k},
      {"rank_v", a.rank_v},
      {"rank_h", a.rank_h},
      {"code_encoding", static_cast<int>(a.code_encoding)},
      {"patch_hidden", patch_dims},
      {"patch_order", a.patch_order},
      {"patch_budget", a.patch_budget},
      {"recompute_block", {a.recompute_first, a.recompute_end}},
      {"report", a.report},
      {"quality", QualityRecordsToJson(a.quality)},
  };
  if (!a.basis_id.empty()) meta["basis"] = {{"id", a.basis_id}, {"kind", a.basis_kind}};
  if (meta_out != nullptr) *meta_out = std::move(meta);
  return m;
}

absl::Status ScdArtifact::Save(const std::string& path) {
  nlohmann::json meta;
  const TensorMap m = ArtifactTensors(*this, &meta);
  id = TensorDigest(m);
  return WriteSafetensors(path, m, {{"scd", meta.dump()}});
}

absl::StatusOr<ScdArtifact> ScdArtifact::Load(const std::string& path) {
  SCD_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  if (file->metadata().count("scd_shared")) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": holds the artifacts of several consumers on a shared basis; load the one of "
        "a consumer from it (SharedArtifact)"));
  }
  auto it = file->metadata().find("scd");
  if (it == file->metadata().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not an SCD calibration artifact (no \"scd\" metadata)"));
  }
  const SafetensorsFile& f = *file;
  const TensorReader read = [&f](const std::string& name, absl::Span<const int64_t> shape) {
    return f.ReadAsFloat(name, shape);
  };
  SCD_ASSIGN_OR_RETURN(ScdArtifact a, ArtifactFromParts(path, it->second, read));
  SCD_ASSIGN_OR_RETURN(a.id, LoadedTensorDigest(*file));
  return a;
}

absl::Status ScdArtifact::CheckPair(const Model* producer, const Model* consumer) const {
  if (producer != nullptr && producer->digest() != producer_digest) {
    return absl::FailedPreconditionError(
        absl::StrCat("calibration artifact is for producer '", producer_name, "' (digest ",
                     producer_digest.substr(0, 12), "), but the producer is '",
                     producer->config.name, "' (digest ", producer->digest().substr(0, 12), ")"));
  }
  if (consumer != nullptr && consumer->digest() != consumer_digest) {
    return absl::FailedPreconditionError(
        absl::StrCat("calibration artifact is for consumer '", consumer_name, "' (digest ",
                     consumer_digest.substr(0, 12), "), but the consumer is '",
                     consumer->config.name, "' (digest ", consumer->digest().substr(0, 12), ")"));
  }
  return absl::OkStatus();
}

}  // namespace scd
