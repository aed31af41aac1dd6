// Test support: locating the shared fixtures (../shared), failing clearly when they are
// missing, and a scratch directory per test binary.
#ifndef SCD_TESTS_TEST_SUPPORT_H_
#define SCD_TESTS_TEST_SUPPORT_H_

#include <string>

namespace scd::testing {

// Absolute path of `relative` under the shared fixtures directory. Fails the current test
// (Catch2 FAIL) with a message naming the missing path when it does not exist.
std::string SharedPath(const std::string& relative);

// A fresh, empty temporary directory, removed at process exit.
std::string TempDir();

// Reads a whole file; fails the current test when it cannot.
std::string ReadFileOrFail(const std::string& path);

}  // namespace scd::testing

#endif  // SCD_TESTS_TEST_SUPPORT_H_
