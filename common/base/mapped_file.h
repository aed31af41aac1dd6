// MappedFile: a whole file mapped read-only into memory (POSIX mmap). Checkpoints are read
// through it so that a tensor is only touched when it is converted, and a 16 GB checkpoint
// costs no copy up front. The mapping is private and read-only; the file must not be
// truncated while mapped (a later read would raise SIGBUS), which holds for checkpoints.
#ifndef SCD_COMMON_BASE_MAPPED_FILE_H_
#define SCD_COMMON_BASE_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace scd {

class MappedFile {
 public:
  // Maps `path`. NotFound when it does not exist, FailedPrecondition when it is not a regular
  // file; other errors keep the errno's code. Every message names the path.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  // The file's bytes; nullptr for an empty file. Not necessarily aligned beyond the page.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const {
    return std::string_view(reinterpret_cast<const char*>(data_), size_);
  }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace scd

#endif  // SCD_COMMON_BASE_MAPPED_FILE_H_
