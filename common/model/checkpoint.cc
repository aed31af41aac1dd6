// See checkpoint.h. The index format is transformers' (modeling_utils, "sharded
// checkpoints"): {"metadata": {"total_size": bytes}, "weight_map": {tensor: file}}. Shard
// names must be plain file names: an index is data, and must not make us open files outside
// the checkpoint directory.
#include "common/model/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/model/weight_layout.h"
#include "nlohmann/json.hpp"

namespace scd {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

std::string ShardName(int index, int count) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", index + 1, count);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& dir) {
  std::unique_ptr<SafetensorsCheckpoint> checkpoint(new SafetensorsCheckpoint(dir));
  const std::string single = (fs::path(dir) / kSafetensorsFileName).string();
  const std::string index = (fs::path(dir) / kSafetensorsIndexName).string();
  std::error_code ec;
  if (fs::exists(single, ec)) {
    SCD_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single));
    SCD_RETURN_IF_ERROR(checkpoint->AddFile(std::move(file)));
    return checkpoint;
  }
  if (fs::exists(index, ec)) {
    SCD_RETURN_IF_ERROR(checkpoint->OpenSharded(index));
    return checkpoint;
  }
  std::string hint;
  if (fs::exists(fs::path(dir) / "pytorch_model.bin", ec)) {
    hint = " (pytorch_model.bin is present: convert it to safetensors)";
  }
  return absl::NotFoundError(
      absl::StrCat("no weights in ", dir, ": neither ", single, " nor ", index, hint));
}

absl::Status SafetensorsCheckpoint::AddFile(std::unique_ptr<SafetensorsFile> file) {
  for (const std::string& name : file->TensorNames()) {
    auto [it, inserted] = owner_.emplace(name, file.get());
    if (!inserted) {
      return absl::DataLossError(absl::StrCat("tensor '", name, "' appears in both ",
                                              it->second->path(), " and ", file->path()));
    }
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::Status SafetensorsCheckpoint::OpenSharded(const std::string& index_path) {
  SCD_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(index_path, ": not valid JSON: ", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return absl::DataLossError(absl::StrCat(index_path, ": no 'weight_map' object"));
  }
  const json& weight_map = index["weight_map"];
  // Shards in first-mention order, each opened once.
  std::vector<std::string> shard_names;
  std::set<std::string> seen;
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    if (!it.value().is_string() || !IsPlainFileName(it.value().get<std::string>())) {
      return absl::DataLossError(absl::StrCat(index_path, ": tensor '", it.key(), "' maps to ",
                                              it.value().dump(),
                                              ", not a file name in the checkpoint directory"));
    }
    const std::string shard = it.value().get<std::string>();
    if (seen.insert(shard).second) shard_names.push_back(shard);
  }
  if (shard_names.empty()) {
    return absl::DataLossError(absl::StrCat(index_path, ": 'weight_map' is empty"));
  }
  std::map<std::string, const SafetensorsFile*> by_name;
  for (const std::string& shard : shard_names) {
    const std::string path = (fs::path(dir_) / shard).string();
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
    if (!file.ok()) {
      return absl::Status(
          file.status().code(),
          absl::StrCat(file.status().message(), " (a shard listed in ", index_path, ")"));
    }
    by_name[shard] = file->get();
    SCD_RETURN_IF_ERROR(AddFile(std::move(*file)));
  }
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    const SafetensorsFile* shard = by_name[it.value().get<std::string>()];
    if (shard->Find(it.key()) == nullptr) {
      return absl::DataLossError(absl::StrCat(index_path, ": tensor '", it.key(), "' is mapped to ",
                                              shard->path(), ", which does not contain it"));
    }
  }
  return absl::OkStatus();
}

const TensorInfo* SafetensorsCheckpoint::Find(std::string_view name,
                                              const SafetensorsFile** file) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) return nullptr;
  if (file != nullptr) *file = it->second;
  return it->second->Find(name);
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(owner_.size());
  for (const auto& [name, file] : owner_) names.push_back(name);
  return names;
}

absl::StatusOr<std::vector<float>> SafetensorsCheckpoint::ReadAsFloat(
    std::string_view name, absl::Span<const int64_t> expected_shape) const {
  const SafetensorsFile* file = nullptr;
  if (Find(name, &file) == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        dir_, ": tensor '", absl::string_view(name.data(), name.size()), "' not found"));
  }
  return file->ReadAsFloat(name, expected_shape);
}

absl::Status SaveModel(const ModelConfig& config, const ModelWeights& weights,
                       const std::string& dir, const SaveOptions& options) {
  SCD_RETURN_IF_ERROR(config.Validate());
  if (options.num_shards < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards must be >= 1, got ", options.num_shards));
  }
  if (options.dtype == DType::kUnsupported) {
    return absl::InvalidArgumentError("SaveModel: dtype must be F32, F16 or BF16");
  }
  const std::vector<WeightEntry> layout = WeightLayout(config);
  if (weights.layers.size() != static_cast<size_t>(config.num_layers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SaveModel: weights have ", weights.layers.size(), " layers, config ", config.num_layers));
  }
  int64_t total_elements = 0;
  for (const WeightEntry& entry : layout) {
    const WeightBuffer& data = WeightData(weights, entry);
    if (static_cast<int64_t>(data.size()) != entry.NumElements()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SaveModel: tensor '", entry.name, "' has ", data.size(), " values, shape ",
                       ShapeString(entry.shape), " needs ", entry.NumElements()));
    }
    total_elements += entry.NumElements();
  }
  SCD_RETURN_IF_ERROR(
      WriteFileAtomically((fs::path(dir) / "config.json").string(), config.ToHfConfigJson()));

  const int shards = options.num_shards;
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  json weight_map = json::object();
  size_t next = 0;
  int64_t written = 0;
  for (int s = 0; s < shards; ++s) {
    // Shard s takes tensors until it holds its share of the elements (the last takes all).
    const int64_t target = total_elements * (s + 1) / shards;
    std::map<std::string, SafetensorsTensor> tensors;
    while (next < layout.size() && (s == shards - 1 || written < target)) {
      const WeightEntry& entry = layout[next++];
      tensors[entry.name] =
          SafetensorsTensor::FromFloats(options.dtype, entry.shape, WeightData(weights, entry));
      written += entry.NumElements();
    }
    const std::string name = shards == 1 ? kSafetensorsFileName : ShardName(s, shards);
    for (const auto& [tensor, unused] : tensors) weight_map[tensor] = name;
    SCD_RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / name).string(), tensors, metadata));
  }
  if (shards == 1) return absl::OkStatus();
  const json index = {
      {"metadata",
       {{"total_size", total_elements * static_cast<int64_t>(DTypeSize(options.dtype))}}},
      {"weight_map", weight_map}};
  return WriteFileAtomically((fs::path(dir) / kSafetensorsIndexName).string(), index.dump(2));
}

}  // namespace scd
