// Safetensors reader and writer (see safetensors.h; format spec:
// https://github.com/huggingface/safetensors, "Format"). The reader trusts nothing in the
// file: every length and offset is checked with overflow-safe arithmetic before a pointer
// into the mapping is formed, so a corrupt header is a DataLoss error, never an out-of-bounds
// read. The JSON header is capped at 100 MB, HF's own limit.
#include "common/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file_io.h"
#include "common/base/float16.h"
#include "common/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace scd {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr char kMetadataKey[] = "__metadata__";
constexpr size_t kDataAlignment = 64;  // a cache line; covers every dtype's element size

// Element sizes of every dtype the format defines, so that tensors we cannot read are still
// checked against their byte spans.
size_t ElementSizeOfName(std::string_view name) {
  static const std::pair<std::string_view, size_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [n, size] : kSizes) {
    if (n == name) return size;
  }
  return 0;
}

DType DTypeOfName(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return DType::kUnsupported;
}

uint64_t LoadLittleEndian64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Abseil here predates std::string_view interop (ABSL_OPTION_USE_STD_STRING_VIEW is 0).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string TensorPrefix(std::string_view file, std::string_view tensor) {
  return absl::StrCat(Sv(file), ": tensor '", Sv(tensor), "'");
}

// A non-negative JSON integer.
bool AsCount(const json& value, uint64_t* out) {
  if (!value.is_number_unsigned()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0) return false;
  }
  *out = value.get<uint64_t>();
  return true;
}

}  // namespace

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kUnsupported:
      break;
  }
  return "unsupported";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kUnsupported:
      break;
  }
  return 0;
}

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped = MappedFile::Open(path);
  if (!mapped.ok()) {
    if (absl::IsNotFound(mapped.status())) {
      return absl::NotFoundError(absl::StrCat("safetensors file not found: ", path));
    }
    return mapped.status();
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(std::move(*mapped)));
  SCD_RETURN_IF_ERROR(file->ParseHeader());
  return file;
}

namespace {

// The header of `file` (`data`, `size` bytes): its length (the first 8 bytes, little-endian),
// then that many bytes of JSON, which must be an object.
absl::StatusOr<json> ReadHeader(const std::string& file, const uint8_t* data, size_t size,
                                uint64_t* header_len) {
  if (size < 8) {
    return absl::DataLossError(
        absl::StrCat(file, ": truncated safetensors file (", size, " bytes, no header)"));
  }
  *header_len = LoadLittleEndian64(data);
  if (*header_len > size - 8) {
    return absl::DataLossError(absl::StrCat(file, ": header length ", *header_len,
                                            " exceeds the file (", size,
                                            " bytes); truncated or not a safetensors file"));
  }
  if (*header_len > kMaxHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(file, ": header length ", *header_len, " exceeds the 100 MB limit"));
  }
  const char* header_begin = reinterpret_cast<const char*>(data + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + *header_len);
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(file, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) {
    return absl::DataLossError(absl::StrCat(file, ": header is not a JSON object"));
  }
  return header;
}

// The header entry of tensor `name`: its dtype, shape and data_offsets, which must lie in the
// data region (`data_size` bytes from `data_begin`) and, for a known dtype, span exactly the
// shape's bytes.
absl::StatusOr<TensorInfo> ParseTensorEntry(const std::string& file, const std::string& name,
                                            const json& entry, const uint8_t* data_begin,
                                            uint64_t data_size) {
  const std::string where = TensorPrefix(file, name);
  if (!entry.is_object()) {
    return absl::DataLossError(absl::StrCat(where, ": header entry is not an object"));
  }
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return absl::DataLossError(absl::StrCat(where, ": missing or non-string 'dtype'"));
  }
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return absl::DataLossError(absl::StrCat(where, ": missing or non-list 'shape'"));
  }
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return absl::DataLossError(absl::StrCat(where, ": 'data_offsets' must be a list [begin, end]"));
  }
  TensorInfo info;
  info.name = name;
  info.dtype_name = dtype_it->get<std::string>();
  info.dtype = DTypeOfName(info.dtype_name);
  uint64_t elements = 1;
  bool overflow = false;
  for (const json& dim : *shape_it) {
    uint64_t d = 0;
    if (!AsCount(dim, &d) || d > uint64_t{INT64_MAX}) {
      return absl::DataLossError(
          absl::StrCat(where, ": shape ", dim.dump(), " is not a list of counts"));
    }
    info.shape.push_back(static_cast<int64_t>(d));
    overflow |= __builtin_mul_overflow(elements, d, &elements);
  }
  uint64_t begin = 0, end = 0;
  if (!AsCount((*offsets_it)[0], &begin) || !AsCount((*offsets_it)[1], &end) || begin > end) {
    return absl::DataLossError(absl::StrCat(where, ": bad data_offsets ", offsets_it->dump()));
  }
  if (end > data_size) {
    return absl::DataLossError(absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                                            ") run past the data region (", data_size,
                                            " bytes); the file is truncated or corrupt"));
  }
  const size_t element_size = ElementSizeOfName(info.dtype_name);
  uint64_t expected_bytes = 0;
  overflow |= __builtin_mul_overflow(elements, uint64_t{element_size}, &expected_bytes);
  if (element_size != 0 && (overflow || expected_bytes != end - begin)) {
    return absl::DataLossError(
        absl::StrCat(where, ": shape ", ShapeString(info.shape), " of ", info.dtype_name, " needs ",
                     overflow ? std::string("more than 2^64") : absl::StrCat(expected_bytes),
                     " bytes but data_offsets span ", end - begin));
  }
  info.data = data_begin + begin;
  info.nbytes = static_cast<size_t>(end - begin);
  return info;
}

// A tensor's bytes in the data region.
struct ByteRange {
  uint64_t begin, end;
  const std::string* name;
};

// No two tensors' bytes may overlap.
absl::Status CheckNoOverlap(const std::string& file, std::vector<ByteRange> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      return absl::DataLossError(absl::StrCat(TensorPrefix(file, *spans[i].name), ": data [",
                                              spans[i].begin, ", ", spans[i].end,
                                              ") overlaps tensor '", *spans[i - 1].name, "' [",
                                              spans[i - 1].begin, ", ", spans[i - 1].end, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SafetensorsFile::ParseHeader() {
  const std::string& file = path();
  const size_t file_size = file_->size();
  uint64_t header_len = 0;
  SCD_ASSIGN_OR_RETURN(const json header, ReadHeader(file, file_->data(), file_size, &header_len));
  const uint64_t data_size = file_size - 8 - header_len;
  const uint8_t* data_begin = file_->data() + 8 + header_len;
  std::vector<ByteRange> spans;
  spans.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == kMetadataKey) {
      if (entry.is_object()) {
        for (auto m = entry.begin(); m != entry.end(); ++m) {
          if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
        }
      }
      continue;
    }
    SCD_ASSIGN_OR_RETURN(TensorInfo info,
                         ParseTensorEntry(file, name, entry, data_begin, data_size));
    const uint64_t begin = static_cast<uint64_t>(info.data - data_begin);
    const uint64_t end = begin + info.nbytes;
    auto [pos, inserted] = tensors_.emplace(name, std::move(info));
    if (!inserted) {
      return absl::DataLossError(
          absl::StrCat(TensorPrefix(file, name), ": listed twice in the header"));
    }
    if (end > begin) spans.push_back({begin, end, &pos->first});
  }
  return CheckNoOverlap(file, std::move(spans));
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) names.push_back(name);
  return names;
}

absl::Status CheckReadable(const TensorInfo& info, std::string_view file) {
  if (info.dtype != DType::kUnsupported) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(TensorPrefix(file, info.name), ": dtype ",
                                               info.dtype_name,
                                               " is not supported (supported: F32, F16, BF16)"));
}

void ConvertElementsToFloat(DType dtype, const uint8_t* src, size_t n, float* out) {
  switch (dtype) {
    case DType::kF32:
      // Little-endian host assumed (x86-64 and AArch64), as the format is little-endian.
      if (n > 0) std::memcpy(out, src, n * sizeof(float));
      break;
    case DType::kF16:
      HalfToFloat(src, out, n);
      break;
    case DType::kBF16:
      Bfloat16ToFloat(src, out, n);
      break;
    case DType::kUnsupported:
      break;
  }
}

absl::Status ConvertTensorToFloat(const TensorInfo& info, std::string_view file, float* out) {
  SCD_RETURN_IF_ERROR(CheckReadable(info, file));
  ConvertElementsToFloat(info.dtype, info.data, static_cast<size_t>(info.NumElements()), out);
  return absl::OkStatus();
}

absl::Status CheckTensorShape(const TensorInfo& info, std::string_view file,
                              absl::Span<const int64_t> expected) {
  if (absl::MakeConstSpan(info.shape) == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(TensorPrefix(file, info.name), " has shape ",
                                                 ShapeString(info.shape), ", expected ",
                                                 ShapeString(expected)));
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadAsFloat(std::string_view name) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(TensorPrefix(path(), name), " not found"));
  }
  SCD_RETURN_IF_ERROR(CheckReadable(*info, path()));
  std::vector<float> out(static_cast<size_t>(info->NumElements()));
  SCD_RETURN_IF_ERROR(ConvertTensorToFloat(*info, path(), out.data()));
  return out;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::ReadAsFloat(
    std::string_view name, absl::Span<const int64_t> expected_shape) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(TensorPrefix(path(), name), " not found"));
  }
  SCD_RETURN_IF_ERROR(CheckTensorShape(*info, path(), expected_shape));
  return ReadAsFloat(name);
}

SafetensorsTensor SafetensorsTensor::FromFloats(DType dtype, std::vector<int64_t> shape,
                                                absl::Span<const float> values) {
  SafetensorsTensor tensor;
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  tensor.bytes.resize(values.size() * DTypeSize(dtype));
  switch (dtype) {
    case DType::kF32:
      if (!values.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
      break;
    case DType::kF16:
      FloatToHalf(values.data(), tensor.bytes.data(), values.size());
      break;
    case DType::kBF16:
      FloatToBfloat16(values.data(), tensor.bytes.data(), values.size());
      break;
    case DType::kUnsupported:
      break;
  }
  return tensor;
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::map<std::string, SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  std::vector<std::string_view> parts;
  parts.reserve(tensors.size() + 2);
  parts.emplace_back();  // length, filled below
  parts.emplace_back();  // header
  for (const auto& [name, tensor] : tensors) {
    const std::string where = TensorPrefix(path, name);
    if (name.empty() || name == kMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": reserved or empty name"));
    }
    if (tensor.dtype == DType::kUnsupported) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": dtype must be F32, F16 or BF16"));
    }
    uint64_t elements = 1;
    for (int64_t d : tensor.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": negative dimension in ", ShapeString(tensor.shape)));
      }
      elements *= static_cast<uint64_t>(d);
    }
    if (elements * DTypeSize(tensor.dtype) != tensor.bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": shape ", ShapeString(tensor.shape), " of ", Sv(DTypeName(tensor.dtype)),
          " needs ", elements * DTypeSize(tensor.dtype), " bytes, got ", tensor.bytes.size()));
    }
    header[name] = {{"dtype", std::string(DTypeName(tensor.dtype))},
                    {"shape", tensor.shape},
                    {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
    parts.emplace_back(tensor.bytes);
  }
  std::string header_text = header.dump();
  // Pad so that the data region (after the 8-byte length and the header) starts on a
  // kDataAlignment boundary: packed tensors of one dtype then all sit at multiples of their
  // element size, and LoadModel can view F32 ones in place.
  header_text.append((kDataAlignment - (8 + header_text.size()) % kDataAlignment) % kDataAlignment,
                     ' ');
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(header_text.size() >> (8 * i));
  parts[0] = std::string_view(length, sizeof(length));
  parts[1] = header_text;
  return WriteFileAtomically(path, parts);
}

}  // namespace scd
