// The seed replay of a libFuzzer target, without libFuzzer: runs the target's
// LLVMFuzzerTestOneInput over every file of its seed corpus. The regular build and CI use it to
// check that each target compiles and that every seed still holds the properties the target
// asserts (a failed FuzzCheck aborts, and so does a crash). Fuzzing itself is scripts/fuzz.sh.
//   <target>_replay CORPUS_DIR
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(argv[1], ec)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  if (ec || files.empty()) {
    std::fprintf(stderr, "%s: no seed inputs in %s\n", argv[0], argv[1]);
    return 1;
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& path : files) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay %s (%zu bytes)\n", path.filename().c_str(), bytes.size());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("%zu seed inputs replayed without a failure\n", files.size());
  return 0;
}
