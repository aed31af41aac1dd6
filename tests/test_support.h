// Test support: locating the shared fixtures (../shared) and the source tree, failing clearly
// when they are missing, and a scratch directory per test binary.
#ifndef SCD_TESTS_TEST_SUPPORT_H_
#define SCD_TESTS_TEST_SUPPORT_H_

#include <string>

namespace scd::testing {

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

// Reads a whole file; fails the current test when it cannot.
std::string ReadFileOrFail(const std::string& path);

}  // namespace scd::testing

#endif  // SCD_TESTS_TEST_SUPPORT_H_
