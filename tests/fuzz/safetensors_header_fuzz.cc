// Fuzzes the safetensors reader (common/model/safetensors.h) on whole files: the 8-byte header
// length, the JSON header, every entry's dtype/shape/data_offsets and the overlap check. The
// input is the file. Whatever Open accepts must then be readable as documented: every tensor
// lies inside the file, and ReadAsFloat of a readable dtype returns NumElements() floats.
#include <cstddef>
#include <cstdint>

#include "common/model/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scd::fuzz::InMemoryFile::Get().Write(data, size);
  auto file = scd::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  for (const std::string& name : (*file)->TensorNames()) {
    const scd::TensorInfo* info = (*file)->Find(name);
    FUZZ_CHECK(info != nullptr);
    FUZZ_CHECK(info->nbytes <= size);
    if (!scd::CheckReadable(*info, path).ok()) continue;
    // Bound the work per input: a header may describe a large tensor over a small data region
    // only when the shape contains a zero, and then nothing is read.
    auto values = (*file)->ReadAsFloat(name, info->shape);
    FUZZ_CHECK(values.ok());
    FUZZ_CHECK(static_cast<int64_t>(values->size()) == info->NumElements());
  }
  (void)(*file)->metadata();
  return 0;
}
