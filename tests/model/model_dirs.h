// Checkpoint directories for model tests: a fresh one to save into, and loading one back
// (failing the test, with the loader's message, when it does not load).
#ifndef SCD_TESTS_MODEL_MODEL_DIRS_H_
#define SCD_TESTS_MODEL_MODEL_DIRS_H_

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>

#include "common/model/weights.h"
#include "tests/test_support.h"

namespace scd::testing {

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
