// Whole-file reads and atomic writes. Artifacts (checkpoints, calibration outputs) are written
// to a temporary name in the target's directory and renamed into place, so a reader never
// sees a half-written file and a crash leaves the old version intact (the leveldb habit).
#ifndef SCD_COMMON_BASE_FILE_IO_H_
#define SCD_COMMON_BASE_FILE_IO_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace scd {

// The file's contents. NotFound naming the path when it does not exist.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes the concatenation of `parts` to `path` atomically (temp file, fsync, rename).
absl::Status WriteFileAtomically(const std::string& path, absl::Span<const std::string_view> parts);
inline absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  return WriteFileAtomically(path, absl::MakeConstSpan(&contents, 1));
}

}  // namespace scd

#endif  // SCD_COMMON_BASE_FILE_IO_H_
