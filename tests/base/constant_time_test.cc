#include "common/base/constant_time.h"

#include <catch2/catch.hpp>

namespace scd {
namespace {

TEST_CASE("ConstantTimeEquals is equality, whatever the lengths", "[cpu]") {
  CHECK(ConstantTimeEquals("Bearer sk-1", "Bearer sk-1"));
  CHECK(ConstantTimeEquals("", ""));
  CHECK_FALSE(ConstantTimeEquals("Bearer sk-2", "Bearer sk-1"));   // last byte differs
  CHECK_FALSE(ConstantTimeEquals("xearer sk-1", "Bearer sk-1"));   // first byte differs
  CHECK_FALSE(ConstantTimeEquals("Bearer sk-1x", "Bearer sk-1"));  // longer
  CHECK_FALSE(ConstantTimeEquals("Bearer", "Bearer sk-1"));        // a prefix
  CHECK_FALSE(ConstantTimeEquals("", "Bearer sk-1"));
  CHECK_FALSE(ConstantTimeEquals("a", ""));
}

}  // namespace
}  // namespace scd
