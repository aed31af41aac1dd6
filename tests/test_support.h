// Test support: locating the shared fixtures (../shared) and the source tree, failing clearly
// when they are missing, and a scratch directory per test binary.
#ifndef SCD_TESTS_TEST_SUPPORT_H_
#define SCD_TESTS_TEST_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace scd::testing {

// A status's message, and whether it contains `text`.
inline std::string StatusText(const absl::Status& status) { return std::string(status.message()); }
inline bool StatusHas(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

// Absolute path of `relative` under the shared fixtures directory: $SCD_SHARED_DIR when set,
// else the one configured at build time (../shared beside the repo). Fails the current test
// (Catch2 FAIL) with a message naming the missing path when it does not exist.
std::string SharedPath(const std::string& relative);

// Absolute path of `relative` under the source tree: $SCD_SOURCE_DIR when set (a prebuilt
// test binary run elsewhere, see scripts/gpu_bundle.sh), else the tree it was built from.
// Fails the current test when the file does not exist.
std::string SourceFile(const std::string& relative);

// A fresh, empty temporary directory, removed at process exit.
std::string TempDir();

// n draws of N(0, sd²) from a generator seeded with `seed`: the same numbers on every run.
std::vector<float> NormalFloats(size_t n, uint32_t seed, float sd = 1.0f);

// Reads a whole file; fails the current test when it cannot.
std::string ReadFileOrFail(const std::string& path);

// Runs `command` with /bin/sh, stdout and stderr captured together (redirect one of them in
// `command` to capture the other alone). exit_code is -1 when the shell did not exit normally.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult RunCommand(const std::string& command);
bool CommandExists(const std::string& name);

// Quotes `word` for /bin/sh.
std::string ShellQuote(const std::string& word);

// How many times longer a test may wait for work to end in a sanitizer build: the same work
// runs several times slower there (TSan 5-15x), and ctest may run two binaries on 2 cores. A
// bound on a wait only turns a hang into a failure, so a longer one costs a passing test
// nothing.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizerWaitFactor = 5;
#else
inline constexpr int kSanitizerWaitFactor = 1;
#endif

}  // namespace scd::testing

#endif  // SCD_TESTS_TEST_SUPPORT_H_
