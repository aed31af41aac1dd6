// Shared helpers for the runtime tests: loading a fixture model into a CPU backend.
#ifndef SCD_TESTS_RUNTIME_RUNTIME_FIXTURES_H_
#define SCD_TESTS_RUNTIME_RUNTIME_FIXTURES_H_

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "tests/test_support.h"

namespace scd::testing {

// A CPU backend for the checkpoint at ../shared/<relative_dir>; fails the test on error.
inline std::unique_ptr<Backend> MakeBackend(const std::string& relative_dir) {
  auto model = LoadModel(SharedPath(relative_dir));
  INFO(model.status());
  REQUIRE(model.ok());
  auto backend = CreateBackend(BackendKind::kCpu, *model);
  INFO(backend.status());
  REQUIRE(backend.ok());
  return std::move(backend).value();
}

}  // namespace scd::testing

#endif  // SCD_TESTS_RUNTIME_RUNTIME_FIXTURES_H_
