// A process that runs only the CPU backend never maps cuBLAS, even in a CUDA build: the library
// is opened when a CUDA backend first needs it (kernels/cuda/gemm.cc), so CPU-only processes
// skip its start-up cost (about 0.1 s and 200 MB of peak RSS).
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "common/runtime/backend.h"
#include "tests/test_support.h"

namespace scd {
namespace {

std::string Maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("A CPU-only process never maps cuBLAS", "[cpu]") {
  auto model = LoadModel(testing::SharedPath("models/stories260K"));
  REQUIRE(model.ok());
  auto backend = CreateBackend(BackendKind::kCpu, *model);
  REQUIRE(backend.ok());
  auto seq = (*backend)->NewSequence(8);
  REQUIRE(seq.ok());
  PrefillResult r;
  const std::vector<int32_t> ids = {1, 403, 407};
  REQUIRE((*backend)->Prefill(**seq, ids, PrefillOptions{}, &r).ok());
  const std::string maps = Maps();
  REQUIRE(!maps.empty());
  CHECK(maps.find("libcublas") == std::string::npos);
}

}  // namespace scd
