// Helpers shared by the libFuzzer targets in tests/fuzz/.
//   InMemoryFile: for parsers that only open paths (SafetensorsFile::Open, ScdArtifact::Load),
//     the input is written to an anonymous memfd and opened as /proc/self/fd/N, so the fuzzer
//     touches no disk and the parser runs its real mmap path.
//   FuzzCheck: a property the parser promises (a round trip, a bound) failed; abort so that
//     libFuzzer saves the input as a crash.
#ifndef SCD_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define SCD_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace scd::fuzz {

class InMemoryFile {
 public:
  // One per process (the fuzz loop is single-threaded); exits when memfd is unavailable.
  static InMemoryFile& Get() {
    static InMemoryFile* file = new InMemoryFile();
    return *file;
  }

  // Replaces the file's contents with data[0, size) and returns a path that opens it.
  const std::string& Write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != ssize_t(size))) {
      std::perror("fuzz: writing the memfd");
      std::abort();
    }
    return path_;
  }

 private:
  InMemoryFile() {
    fd_ = ::memfd_create("scd-fuzz-input", 0);
    if (fd_ < 0) {
      std::perror("fuzz: memfd_create");
      std::exit(1);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }

  int fd_;
  std::string path_;
};

}  // namespace scd::fuzz

#define FUZZ_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

#endif  // SCD_TESTS_FUZZ_FUZZ_SUPPORT_H_
