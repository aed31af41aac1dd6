// Model tests' helpers: checkpoint directories (a fresh one to save into, and loading one back,
// failing the test with the loader's message when it does not load), and what timing
// assertions need.
#ifndef SCD_TESTS_MODEL_MODEL_DIRS_H_
#define SCD_TESTS_MODEL_MODEL_DIRS_H_

#include <catch2/catch.hpp>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>

#include "common/model/weights.h"
#include "tests/test_support.h"

namespace scd::testing {

// Timing assertions hold in optimised, unsanitised builds only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(NDEBUG)
inline constexpr bool kOptimizedBuild = false;
#else
inline constexpr bool kOptimizedBuild = true;
#endif

// CPU seconds of the whole process (all threads). Timing assertions use it rather than wall
// time: test machines are shared, and waiting for a core is not our cost. On an idle machine
// wall time is at most this (the work runs on all cores).
inline double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

inline std::string NewModelDir() {
  const std::string dir = TempDir();
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::shared_ptr<const Model> LoadOrFail(const std::string& dir) {
  auto model = LoadModel(dir);
  INFO(model.status().message());
  REQUIRE(model.ok());
  return *model;
}

}  // namespace scd::testing

#endif  // SCD_TESTS_MODEL_MODEL_DIRS_H_
