// See sekv_artifact.h.
#include "common/sekv/sekv_artifact.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "common/base/sha256.h"
#include "common/base/status_macros.h"
#include "common/model/safetensors.h"

namespace scd::sekv {
namespace {

constexpr int kFormatVersion = 1;
using TensorMap = std::map<std::string, SafetensorsTensor>;

std::string TensorDigest(const TensorMap& m) {
  Sha256 h;
  for (const auto& [name, t] : m) {
    h.Update(name);
    h.Update(t.bytes);
  }
  return Sha256::ToHex(h.Finish());
}

TensorMap Tensors(const ZoomRouter& r) {
  const int64_t l = r.num_layers(), g = r.num_kv_heads(), rd = r.route_dim(), hd = r.head_dim();
  std::vector<float> gates;
  for (int i = 0; i < l; ++i) {
    for (int j = 0; j < g; ++j) {
      const RouterGate& gt = r.gate(i, j);
      gates.insert(gates.end(), {gt.w_size, gt.w_share, gt.bias, gt.tau});
    }
  }
  TensorMap m;
  m["router.p_q"] = SafetensorsTensor::FromFloats(DType::kF32, {l, g, rd, hd}, r.all_p_q());
  m["router.p_k"] = SafetensorsTensor::FromFloats(DType::kF32, {l, g, rd, hd}, r.all_p_k());
  m["router.gate"] = SafetensorsTensor::FromFloats(DType::kF32, {l, g, 4}, gates);
  return m;
}

}  // namespace

absl::Status SekvArtifact::Save(const std::string& path) const {
  SCD_RETURN_IF_ERROR(router.Validate());
  const TensorMap m = Tensors(router);
  const nlohmann::json meta = {{"format_version", kFormatVersion},
                               {"model", {{"name", model_name}, {"digest", model_digest}}},
                               {"num_layers", router.num_layers()},
                               {"num_kv_heads", router.num_kv_heads()},
                               {"head_dim", router.head_dim()},
                               {"route_dim", router.route_dim()},
                               {"tensor_sha256", TensorDigest(m)},
                               {"report", report}};
  return WriteSafetensors(path, m, {{"sekv", meta.dump()}});
}

absl::StatusOr<SekvArtifact> SekvArtifact::Load(const std::string& path) {
  SCD_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  auto it = file->metadata().find("sekv");
  if (it == file->metadata().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a SEKV artifact (no \"sekv\" metadata)"));
  }
  SekvArtifact a;
  int l = 0, g = 0, hd = 0, rd = 0;
  std::string digest;
  try {
    const nlohmann::json meta = nlohmann::json::parse(it->second);
    if (meta.at("format_version").get<int>() != kFormatVersion) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": SEKV artifact format version ",
                                                     meta.at("format_version").dump(), " is not ",
                                                     kFormatVersion));
    }
    a.model_name = meta.at("model").at("name");
    a.model_digest = meta.at("model").at("digest");
    l = meta.at("num_layers");
    g = meta.at("num_kv_heads");
    hd = meta.at("head_dim");
    rd = meta.at("route_dim");
    digest = meta.at("tensor_sha256");
    a.report = meta.value("report", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": malformed SEKV metadata: ", e.what()));
  }
  if (l <= 0 || g <= 0 || hd <= 0 || rd <= 0 || rd > hd) {
    return absl::DataLossError(absl::StrCat(path, ": SEKV artifact has an invalid shape"));
  }
  a.router.Reset(l, g, hd, rd);
  SCD_ASSIGN_OR_RETURN(a.router.all_p_q(), file->ReadAsFloat("router.p_q", {l, g, rd, hd}));
  SCD_ASSIGN_OR_RETURN(a.router.all_p_k(), file->ReadAsFloat("router.p_k", {l, g, rd, hd}));
  SCD_ASSIGN_OR_RETURN(std::vector<float> gates, file->ReadAsFloat("router.gate", {l, g, 4}));
  for (int i = 0; i < l; ++i) {
    for (int j = 0; j < g; ++j) {
      const float* x = gates.data() + (static_cast<size_t>(i) * g + j) * 4;
      a.router.gate(i, j) = RouterGate{x[0], x[1], x[2], x[3]};
    }
  }
  if (TensorDigest(Tensors(a.router)) != digest) {
    return absl::DataLossError(
        absl::StrCat(path, ": SEKV artifact tensors do not match their digest"));
  }
  if (auto st = a.router.Validate(); !st.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", st.message()));
  }
  return a;
}

absl::Status SekvArtifact::CheckModel(const Model& model) const {
  if (model.digest() != model_digest) {
    return absl::FailedPreconditionError(
        absl::StrCat("SEKV router was calibrated for '", model_name, "' (digest ",
                     model_digest.substr(0, 12), "), but the model is '", model.config.name,
                     "' (digest ", model.digest().substr(0, 12), ")"));
  }
  return absl::OkStatus();
}

}  // namespace scd::sekv
