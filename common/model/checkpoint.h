// Hugging Face checkpoint directories: the tensors of `model.safetensors`, or of the shards a
// `model.safetensors.index.json` lists ({"weight_map": {tensor: shard file}}), behind one
// lookup; and SaveModel, which writes a directory LoadModel reads back (config.json plus one
// file or N shards with an index). Each shard is mapped once, however many tensors it holds.
#ifndef SCD_COMMON_MODEL_CHECKPOINT_H_
#define SCD_COMMON_MODEL_CHECKPOINT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/config.h"
#include "common/model/safetensors.h"
#include "common/model/weights.h"

namespace scd {

inline constexpr char kSafetensorsFileName[] = "model.safetensors";
inline constexpr char kSafetensorsIndexName[] = "model.safetensors.index.json";

class SafetensorsCheckpoint {
 public:
  // Opens `<dir>/model.safetensors`, else the shards of `<dir>/model.safetensors.index.json`.
  // NotFound naming both paths when neither exists; DataLoss when the index is corrupt, names
  // a shard outside `dir`, or maps a tensor to a shard that lacks it.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // The tensor and (when `file` is non-null) the file holding it; nullptr when absent.
  const TensorInfo* Find(std::string_view name, const SafetensorsFile** file = nullptr) const;
  std::vector<std::string> TensorNames() const;  // sorted
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

  // As SafetensorsFile::ReadAsFloat; NotFound names the directory and the tensor.
  absl::StatusOr<std::vector<float>> ReadAsFloat(std::string_view name,
                                                 absl::Span<const int64_t> expected_shape) const;

 private:
  explicit SafetensorsCheckpoint(std::string dir) : dir_(std::move(dir)) {}
  absl::Status AddFile(std::unique_ptr<SafetensorsFile> file);
  absl::Status OpenSharded(const std::string& index_path);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*, std::less<>> owner_;
};

struct SaveOptions {
  DType dtype = DType::kF32;  // F32, F16 or BF16
  int num_shards = 1;         // > 1 writes model-0000i-of-0000N.safetensors plus the index
};

// Writes `config` (as HF config.json) and `weights` to `dir`, which must exist. Tensors are
// split across shards in WeightLayout order, each shard holding about an equal byte share.
absl::Status SaveModel(const ModelConfig& config, const ModelWeights& weights,
                       const std::string& dir, const SaveOptions& options = {});

}  // namespace scd

#endif  // SCD_COMMON_MODEL_CHECKPOINT_H_
