// Safetensors files (Hugging Face's checkpoint format): reading through a read-only mmap, and
// writing. Layout: an 8-byte little-endian header length N, N bytes of JSON header mapping
// each tensor name to {dtype, shape, data_offsets: [begin, end)} relative to the data region
// that follows, and an optional "__metadata__" object of strings.
//
// Open validates the whole header before anything is read: N fits in the file, the JSON
// parses, every entry is well formed, shape product × dtype size == end - begin, offsets lie
// inside the data region and no two tensors overlap (gaps and any order are allowed, as in
// the format spec). A truncated or corrupt file is an error naming the file and the tensor,
// never a crash. Any dtype may appear in the file; only F32, F16 and BF16 can be read, and
// others are rejected only when requested.
#ifndef SCD_COMMON_MODEL_SAFETENSORS_H_
#define SCD_COMMON_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/mapped_file.h"

namespace scd {

enum class DType { kF32, kF16, kBF16, kUnsupported };

// "F32", "F16", "BF16" (the header's spelling); "unsupported" otherwise.
std::string_view DTypeName(DType dtype);
// 4, 2, 2; 0 for kUnsupported.
size_t DTypeSize(DType dtype);
// "[512, 64]".
std::string ShapeString(absl::Span<const int64_t> shape);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kUnsupported;
  std::string dtype_name;  // as the header spells it ("I64" for an unsupported dtype)
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the file mapping; any alignment
  size_t nbytes = 0;

  int64_t NumElements() const;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. NotFound when the file does not exist; DataLoss when it is
  // truncated or corrupt. Messages name the file (and the tensor, when one is at fault).
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  // The mapping the tensors' `data` point into; views of it keep it alive.
  const std::shared_ptr<const MappedFile>& mapping() const { return file_; }
  // Where `info` (one of this file's tensors) starts, in bytes from the start of the file.
  size_t OffsetInFile(const TensorInfo& info) const {
    return static_cast<size_t>(info.data - file_->data());
  }
  // nullptr when the file has no tensor `name`.
  const TensorInfo* Find(std::string_view name) const;
  std::vector<std::string> TensorNames() const;  // sorted
  size_t num_tensors() const { return tensors_.size(); }
  // The "__metadata__" entries whose values are strings (others are ignored).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor converted to F32 (F16 and BF16 widen exactly). NotFound when absent,
  // Unimplemented for other dtypes; with `expected_shape`, InvalidArgument when the shape
  // differs (the message gives both).
  absl::StatusOr<std::vector<float>> ReadAsFloat(std::string_view name) const;
  absl::StatusOr<std::vector<float>> ReadAsFloat(std::string_view name,
                                                 absl::Span<const int64_t> expected_shape) const;

 private:
  explicit SafetensorsFile(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {}
  absl::Status ParseHeader();

  std::shared_ptr<const MappedFile> file_;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// OK for F32/F16/BF16; Unimplemented naming the file, tensor and dtype otherwise.
absl::Status CheckReadable(const TensorInfo& info, std::string_view file);
// Converts `info`'s elements to F32 into out[0, info.NumElements()). `file` names the source in
// errors (Unimplemented for dtypes other than F32/F16/BF16).
absl::Status ConvertTensorToFloat(const TensorInfo& info, std::string_view file, float* out);
// out[i] = widen(src[i]) for n elements of a readable dtype (F32, F16, BF16), any alignment.
void ConvertElementsToFloat(DType dtype, const uint8_t* src, size_t n, float* out);
// Checks `info.shape == expected`; the InvalidArgument error names file, tensor and shapes.
absl::Status CheckTensorShape(const TensorInfo& info, std::string_view file,
                              absl::Span<const int64_t> expected);

// One tensor to write: little-endian element bytes of `dtype` (F32, F16 or BF16).
struct SafetensorsTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;

  // Narrows `values` to `dtype` (round to nearest even for F16/BF16).
  static SafetensorsTensor FromFloats(DType dtype, std::vector<int64_t> shape,
                                      absl::Span<const float> values);
};

// Writes a safetensors file atomically: tensors in name order, packed (the format allows no
// holes), the header padded with spaces (which the format allows) so that the data region
// starts at a multiple of 64 bytes: every tensor whose offset is a multiple of its element
// size (all of them in a one-dtype file) is then aligned in memory when the file is mapped.
// InvalidArgument naming the tensor when its byte count does not match shape × dtype size,
// when its dtype is unsupported or its name is empty or reserved.
absl::Status WriteSafetensors(const std::string& path,
                              const std::map<std::string, SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace scd

#endif  // SCD_COMMON_MODEL_SAFETENSORS_H_
