// Parity of the cuBLAS BF16 GEMM (kernels/cuda/gemm.h) with cpu::Linear. Two comparisons:
//   - against cpu::Linear on the BF16-rounded x and W: both sides multiply the same values
//     exactly and accumulate in F32, so only the summation order differs: atol 1e-5 * |x|·|w|
//     (the sum of |x_i w_i|, a standard bound for reordered F32 sums of k <= 4096 terms is
//     ~k * 2^-24, well under 1e-5 * sqrt(k) for random signs) and rtol 1e-5;
//   - against cpu::Linear on the unrounded F32 inputs: the BF16 rounding of both operands
//     (2^-9 relative each) dominates: atol 2e-2 * rms(y), rtol 2e-2 (the looser tolerance
//     that BF16 GEMMs need).
#include "kernels/cuda/gemm.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <sstream>

#include "kernels/cpu/ops.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

using cuda::Bf16;
using testing::DeviceArray;

double Rms(const std::vector<float>& y) {
  double s = 0;
  for (float v : y) s += static_cast<double>(v) * v;
  return std::sqrt(s / std::max<size_t>(1, y.size()));
}

// Per-element bound sum_i |x_i w_i| for y = x · wᵀ.
std::vector<float> AbsProducts(const std::vector<float>& x, const std::vector<float>& w, int m,
                               int n, int k) {
  std::vector<float> out(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) s += std::abs(x[i * k + p] * w[j * static_cast<size_t>(k) + p]);
      out[i * static_cast<size_t>(n) + j] = static_cast<float>(s);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("cuBLAS BF16 Linear matches cpu::Linear", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  auto gemm = cuda::CublasGemm::Create(nullptr);
  testing::RequireOk(gemm.status());
  struct Shape {
    int m, n, k;
  };
  for (const Shape& s : {Shape{1, 256, 512}, Shape{7, 96, 64}, Shape{33, 50, 24},
                         Shape{128, 1024, 4096}, Shape{300, 172, 64}}) {
    INFO("m " << s.m << " n " << s.n << " k " << s.k);
    const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(s.m) * s.k, 1);
    const std::vector<float> w = testing::RandomFloats(static_cast<size_t>(s.n) * s.k, 2, 0.1f);
    const std::vector<float> xr = testing::RoundedBf16(x), wr = testing::RoundedBf16(w);
    DeviceArray<Bf16> x_dev(testing::ToBf16(x)), w_dev(testing::ToBf16(w));
    DeviceArray<float> y_dev(static_cast<size_t>(s.m) * s.n);
    testing::RequireOk((*gemm)->Linear(x_dev.get(), w_dev.get(), y_dev.get(), s.m, s.n, s.k));
    testing::RequireSynced();
    const std::vector<float> got = y_dev.ToHost();

    std::vector<float> want(got.size());
    cpu::Linear(xr.data(), wr.data(), nullptr, want.data(), s.m, s.n, s.k);
    const std::vector<float> bound = AbsProducts(xr, wr, s.m, s.n, s.k);
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double tol = 1e-5 * bound[i] + 1e-5 * std::abs(want[i]);
      bad += !(std::abs(got[i] - want[i]) <= tol);
    }
    CHECK(bad == 0);

    std::vector<float> exact(got.size());
    cpu::Linear(x.data(), w.data(), nullptr, exact.data(), s.m, s.n, s.k);
    testing::CheckClose(got, exact, 2e-2 * Rms(exact), 2e-2, "BF16 GEMM vs F32 GEMM");
  }
}

TEST_CASE("cuBLAS BF16 Linear with beta = 1 fuses the residual add", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  auto gemm = cuda::CublasGemm::Create(nullptr);
  testing::RequireOk(gemm.status());
  const int m = 5, n = 64, k = 128;
  const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(m) * k, 3);
  const std::vector<float> w = testing::RandomFloats(static_cast<size_t>(n) * k, 4, 0.1f);
  const std::vector<float> residual = testing::RandomFloats(static_cast<size_t>(m) * n, 5);
  DeviceArray<Bf16> x_dev(testing::ToBf16(x)), w_dev(testing::ToBf16(w));
  DeviceArray<float> y_dev(residual);
  testing::RequireOk((*gemm)->Linear(x_dev.get(), w_dev.get(), y_dev.get(), m, n, k, 1.0f));
  testing::RequireSynced();
  std::vector<float> want(residual.size());
  const std::vector<float> xr = testing::RoundedBf16(x), wr = testing::RoundedBf16(w);
  cpu::Linear(xr.data(), wr.data(), nullptr, want.data(), m, n, k);
  for (size_t i = 0; i < want.size(); ++i) want[i] += residual[i];
  testing::CheckClose(y_dev.ToHost(), want, 1e-4, 1e-5, "Linear(beta=1)");
}

// cuBLAS is opened on first use, not at start-up; opening it needs no device.
TEST_CASE("cuBLAS is mapped only once a CUDA GEMM needs it", "[cublas]") {
  auto maps = [] {
    std::ifstream in("/proc/self/maps");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const absl::Status loaded = cuda::LoadCublas();
  INFO(loaded);
  REQUIRE(loaded.ok());
  CHECK(maps().find("libcublas") != std::string::npos);
}

}  // namespace scd
