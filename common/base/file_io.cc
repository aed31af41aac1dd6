// See file_io.h. Plain POSIX calls so that every failure keeps its errno in the status.
#include "common/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace scd {
namespace {

absl::Status WriteAll(int fd, const std::string& path, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return absl::ErrnoToStatus(err, absl::StrCat("cannot read ", path));
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const std::string_view> parts) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", tmp));
  absl::Status status;
  for (std::string_view part : parts) {
    status = WriteAll(fd, tmp, part);
    if (!status.ok()) break;
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot sync ", tmp));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot close ", tmp));
  }
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

}  // namespace scd
