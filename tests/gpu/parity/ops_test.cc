// Parity of the elementwise, normalisation, RoPE and logits kernels (kernels/cuda/ops.h) with
// their CPU twins (kernels/cpu/ops.h, scd::ArgMax) on seeded random inputs. Tolerances:
//   - bit-exact where both sides do the same IEEE operations (conversions, embedding, adds,
//     row scatter, argmax);
//   - 1e-5 relative (+1e-6 absolute) for F32 math whose summation order or libm differ
//     (RMSNorm, RoPE, SwiGLU, NLL);
//   - one BF16 ulp (2^-8 relative) where a kernel stores F32 math as BF16 (the KV cache),
//     since a 1e-7 F32 difference may straddle a BF16 rounding boundary.
#include "kernels/cpu/ops.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "common/runtime/sampler.h"
#include "kernels/cuda/ops.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

using cuda::Bf16;
using testing::CheckClose;
using testing::DeviceArray;
using testing::kBf16StoreRtol;
using testing::kSentinel;
using testing::RandomFloats;
using testing::RequireOk;
using testing::RequireSynced;
using testing::Widen;

constexpr double kF32Rtol = 1e-5, kF32Atol = 1e-6;

}  // namespace

TEST_CASE("CUDA device count never fails, and a missing device comes with its reason", "[cuda]") {
  // Runs everywhere: without a driver the count is 0, never a crash, and the status says why
  // (on CI's machines: no driver is loaded) with the CUDA runtime's version.
  const int count = CudaDeviceCount();
  CHECK(count >= 0);
  const absl::Status status = CudaDeviceStatus();
  CHECK(status.ok() == (count > 0));
  if (count == 0) {
    CHECK(status.code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(status.message()),
               Catch::StartsWith("no usable CUDA device: ") && Catch::Contains("CUDA 1"));
    WARN("no CUDA device: the remaining [cuda] tests skip (" << status.message()
                                                             << "; see gpu_check.sh)");
  }
  CHECK(CudaDeviceCount() == count);  // the probe left no sticky error behind
}

TEST_CASE("F32 <-> BF16 conversion is bit-exact with the host rounding", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  std::vector<float> x = RandomFloats(10007, 1, 100.0f);
  // Ties, extremes, signed zero, infinities, a subnormal.
  const float specials[] = {0.0f,     -0.0f,  1.0f,     1.00390625f, 1.01171875f, -3.38e38f,
                            3.38e38f, 1e-40f, INFINITY, -INFINITY,   65504.0f,    1.0f / 3.0f};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  DeviceArray<float> x_dev(x);
  DeviceArray<Bf16> y_dev(x.size());
  RequireOk(cuda::F32ToBf16(x_dev.get(), y_dev.get(), x.size(), nullptr));
  RequireSynced();
  const std::vector<Bf16> y = y_dev.ToHost();
  const std::vector<Bf16> want = testing::ToBf16(x);
  size_t diffs = 0;
  for (size_t i = 0; i < x.size(); ++i) diffs += y[i].bits != want[i].bits;
  CHECK(diffs == 0);

  DeviceArray<float> back_dev(x.size());
  RequireOk(cuda::Bf16ToF32(y_dev.get(), back_dev.get(), x.size(), nullptr));
  RequireSynced();
  const std::vector<float> back = back_dev.ToHost();
  CHECK(std::memcmp(back.data(), Widen(want).data(), x.size() * sizeof(float)) == 0);
}

TEST_CASE("CUDA Embed matches cpu::Embed on the BF16 table", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int vocab = 1000, dim = 320, tokens = 37;
  const std::vector<float> table = RandomFloats(static_cast<size_t>(vocab) * dim, 2);
  const std::vector<int32_t> ids = testing::RandomInts(tokens, 3, vocab);
  DeviceArray<Bf16> table_dev(testing::ToBf16(table));
  DeviceArray<int32_t> ids_dev(ids);
  DeviceArray<float> out_dev(static_cast<size_t>(tokens) * dim);
  RequireOk(cuda::Embed(table_dev.get(), ids_dev.get(), out_dev.get(), tokens, dim, nullptr));
  RequireSynced();
  std::vector<float> want(static_cast<size_t>(tokens) * dim);
  const std::vector<float> rounded = testing::RoundedBf16(table);
  cpu::Embed(rounded.data(), ids.data(), want.data(), tokens, dim);
  CheckClose(out_dev.ToHost(), want, 0, 0, "Embed");
}

TEST_CASE("CUDA RmsNorm matches cpu::RmsNorm", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  for (int dim : {64, 300, 4096}) {
    const int rows = 9;
    INFO("dim " << dim);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(rows) * dim, 4, 3.0f);
    const std::vector<float> gain = RandomFloats(dim, 5, 2.0f);
    std::vector<float> want(x.size());
    cpu::RmsNorm(x.data(), gain.data(), want.data(), rows, dim, 1e-5f);

    DeviceArray<float> x_dev(x), gain_dev(gain), y_dev(x.size());
    DeviceArray<Bf16> y_bf16_dev(x.size());
    RequireOk(cuda::RmsNorm(x_dev.get(), gain_dev.get(), y_dev.get(), y_bf16_dev.get(), rows, dim,
                            1e-5f, nullptr));
    RequireSynced();
    const std::vector<float> got = y_dev.ToHost();
    CheckClose(got, want, kF32Atol, kF32Rtol, "RmsNorm F32 output");
    // The BF16 output is the rounding of the same F32 value.
    CheckClose(Widen(y_bf16_dev.ToHost()), testing::RoundedBf16(got), 0, 0, "RmsNorm BF16 output");

    // In place (y aliases x), F32 only.
    RequireOk(cuda::RmsNorm(x_dev.get(), gain_dev.get(), x_dev.get(), nullptr, rows, dim, 1e-5f,
                            nullptr));
    RequireSynced();
    CheckClose(x_dev.ToHost(), want, kF32Atol, kF32Rtol, "RmsNorm in place");
  }
}

TEST_CASE("CUDA ApplyRope matches cpu::ApplyRope on strided rows", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  for (int head_dim : {8, 64, 128}) {
    INFO("head_dim " << head_dim);
    const int tokens = 11, heads = 3, width = heads * head_dim, stride = width + 40;
    ModelConfig config;
    config.head_dim = head_dim;
    config.rope_theta = 500000.0f;
    const std::vector<float> inv_freq = RopeInverseFrequencies(config);
    REQUIRE(static_cast<int>(inv_freq.size()) == head_dim / 2);
    const std::vector<int32_t> positions = testing::RandomInts(tokens, 6, 30000);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(tokens) * stride, 7);

    std::vector<float> want(static_cast<size_t>(tokens) * width);
    for (int t = 0; t < tokens; ++t) {
      std::memcpy(&want[t * width], &x[t * stride], width * sizeof(float));
    }
    cpu::ApplyRope(want.data(), tokens, heads, head_dim, positions.data(), inv_freq.data());

    DeviceArray<float> x_dev(x), inv_dev(inv_freq);
    DeviceArray<int32_t> pos_dev(positions);
    RequireOk(cuda::ApplyRope(x_dev.get(), tokens, heads, head_dim, stride, pos_dev.get(),
                              inv_dev.get(), nullptr));
    RequireSynced();
    const std::vector<float> out = x_dev.ToHost();
    std::vector<float> got(want.size()), pad, pad_want;
    for (int t = 0; t < tokens; ++t) {
      std::memcpy(&got[t * width], &out[t * stride], width * sizeof(float));
      pad.insert(pad.end(), out.begin() + t * stride + width, out.begin() + (t + 1) * stride);
      pad_want.insert(pad_want.end(), x.begin() + t * stride + width, x.begin() + (t + 1) * stride);
    }
    CheckClose(got, want, kF32Atol, kF32Rtol, "ApplyRope");
    CheckClose(pad, pad_want, 0, 0, "ApplyRope leaves the row padding alone");
  }
}

TEST_CASE("CUDA RopeStoreKv writes RoPE(K) and V into the right cache slots", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int kv_heads = 2, head_dim = 64, kv_dim = kv_heads * head_dim, layers = 3;
  const int capacity = 50, rows = 6, layer = 2;
  ModelConfig config;
  config.head_dim = head_dim;
  const std::vector<float> inv_freq = RopeInverseFrequencies(config);
  // Two sequences; rows alternate between them at scattered positions. Input rows are K | V.
  const std::vector<int32_t> row_seq = {0, 1, 0, 1, 1, 0};
  const std::vector<int32_t> positions = {0, 7, 1, 8, 49, 33};
  const std::vector<float> in = RandomFloats(static_cast<size_t>(rows) * 2 * kv_dim, 8);
  const size_t cache_elems = static_cast<size_t>(layers) * capacity * kv_dim;
  const testing::TestKvCaches caches(2, cache_elems, int64_t{capacity} * kv_dim, kSentinel);
  DeviceArray<float> in_dev(in), inv_dev(inv_freq);
  DeviceArray<int32_t> seq_dev(row_seq), pos_dev(positions);
  RequireOk(cuda::RopeStoreKv(in_dev.get(), in_dev.get() + kv_dim, 2 * kv_dim, rows, seq_dev.get(),
                              pos_dev.get(), caches.table(), layer, kv_heads, head_dim,
                              inv_dev.get(), nullptr));
  RequireSynced();

  const std::vector<float> sentinel(cache_elems, kSentinel);
  std::vector<std::vector<float>> want_k(2, sentinel), want_v(2, sentinel);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> k(in.begin() + r * 2 * kv_dim, in.begin() + r * 2 * kv_dim + kv_dim);
    cpu::ApplyRope(k.data(), 1, kv_heads, head_dim, &positions[r], inv_freq.data());
    const size_t at = (static_cast<size_t>(layer) * capacity + positions[r]) * kv_dim;
    for (int i = 0; i < kv_dim; ++i) {
      want_k[row_seq[r]][at + i] = cuda::RoundToBf16(k[i]);
      want_v[row_seq[r]][at + i] = cuda::RoundToBf16(in[r * 2 * kv_dim + kv_dim + i]);
    }
  }
  for (int s = 0; s < 2; ++s) {
    INFO("sequence " << s);
    CheckClose(Widen(caches.K(s)), want_k[s], 0, kBf16StoreRtol, "K cache");
    CheckClose(Widen(caches.V(s)), want_v[s], 0, 0, "V cache");
  }
}

TEST_CASE("CUDA SwiGlu matches cpu::SwiGlu on the fused gate|up layout", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int rows = 5, ffn = 1000;
  const std::vector<float> gate_up = RandomFloats(static_cast<size_t>(rows) * 2 * ffn, 9, 6.0f);
  std::vector<float> gate, up;
  for (int r = 0; r < rows; ++r) {
    gate.insert(gate.end(), gate_up.begin() + r * 2 * ffn, gate_up.begin() + r * 2 * ffn + ffn);
    up.insert(up.end(), gate_up.begin() + r * 2 * ffn + ffn, gate_up.begin() + (r + 1) * 2 * ffn);
  }
  std::vector<float> want(static_cast<size_t>(rows) * ffn);
  cpu::SwiGlu(gate.data(), up.data(), want.data(), rows * ffn);

  DeviceArray<float> in_dev(gate_up), out_dev(want.size());
  DeviceArray<Bf16> out_bf16_dev(want.size());
  RequireOk(cuda::SwiGlu(in_dev.get(), in_dev.get() + ffn, 2 * ffn, out_dev.get(),
                         out_bf16_dev.get(), rows, ffn, nullptr));
  RequireSynced();
  const std::vector<float> got = out_dev.ToHost();
  CheckClose(got, want, kF32Atol, kF32Rtol, "SwiGlu");
  CheckClose(Widen(out_bf16_dev.ToHost()), testing::RoundedBf16(got), 0, 0, "SwiGlu BF16");
}

TEST_CASE("CUDA LinearSmallBatch matches cpu::Linear for every m it takes", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  // n = 37: a partial last block of 8 warps; k = 1344 (168 vectors of 8): one unrolled pass of
  // 4 x 32 vectors, then a partial tail.
  const int n = 37, k = 1344;
  const std::vector<float> w = RandomFloats(static_cast<size_t>(n) * k, 40, 0.1f);
  const std::vector<float> wr = testing::RoundedBf16(w);
  DeviceArray<Bf16> w_dev(testing::ToBf16(w));
  for (int m = 1; m <= cuda::kSmallBatchMaxRows; ++m) {
    INFO("m " << m);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m) * k, 41 + m);
    const std::vector<float> xr = testing::RoundedBf16(x);
    const std::vector<float> residual = RandomFloats(static_cast<size_t>(m) * n, 60 + m);
    std::vector<float> want(static_cast<size_t>(m) * n), bound(want.size());
    cpu::Linear(xr.data(), wr.data(), nullptr, want.data(), m, n, k);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double b = 0;
        for (int p = 0; p < k; ++p) b += std::abs(xr[i * k + p] * wr[j * size_t{k} + p]);
        bound[i * n + j] = static_cast<float>(b);
      }
    }
    DeviceArray<Bf16> x_dev(testing::ToBf16(x));
    REQUIRE(cuda::LinearSmallBatchSupports(x_dev.get(), w_dev.get(), m, k));
    // beta 0 must not read y: a NaN there would leak into every output.
    DeviceArray<float> y_dev(std::vector<float>(want.size(), std::nanf("")));
    RequireOk(
        cuda::LinearSmallBatch(x_dev.get(), w_dev.get(), y_dev.get(), m, n, k, 0.0f, nullptr));
    DeviceArray<float> acc_dev(residual);
    RequireOk(
        cuda::LinearSmallBatch(x_dev.get(), w_dev.get(), acc_dev.get(), m, n, k, 1.0f, nullptr));
    RequireSynced();
    const std::vector<float> got = y_dev.ToHost(), got_acc = acc_dev.ToHost();
    size_t bad = 0, bad_acc = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      // Reordered F32 sums of the same exact products (see gemm_test.cc).
      bad += !(std::abs(got[i] - want[i]) <= 1e-5 * bound[i] + 1e-5 * std::abs(want[i]));
      const double with_residual = want[i] + residual[i];
      bad_acc += !(std::abs(got_acc[i] - with_residual) <=
                   1e-5 * bound[i] + 1e-5 * std::abs(with_residual) + 1e-6);
    }
    CHECK(bad == 0);
    CHECK(bad_acc == 0);
  }
}

TEST_CASE("CUDA LinearSmallBatch refuses what it cannot read as 16-byte vectors", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  DeviceArray<Bf16> x_dev(9 * 64), w_dev(4 * 64);
  DeviceArray<float> y_dev(9 * 4);
  CHECK(cuda::LinearSmallBatchSupports(x_dev.get(), w_dev.get(), 8, 64));
  CHECK_FALSE(cuda::LinearSmallBatchSupports(x_dev.get(), w_dev.get(), 0, 64));
  CHECK_FALSE(cuda::LinearSmallBatchSupports(x_dev.get(), w_dev.get(), 9, 64));
  CHECK_FALSE(cuda::LinearSmallBatchSupports(x_dev.get(), w_dev.get(), 1, 60));
  CHECK_FALSE(cuda::LinearSmallBatchSupports(x_dev.get() + 1, w_dev.get(), 1, 56));
  CHECK_FALSE(cuda::LinearSmallBatchSupports(x_dev.get(), w_dev.get() + 4, 1, 56));
  const absl::Status status =
      cuda::LinearSmallBatch(x_dev.get(), w_dev.get(), y_dev.get(), 9, 4, 64, 0.0f, nullptr);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()), Catch::Contains("m <= 8"));
}

TEST_CASE("CUDA residual add, bias add and row scatter are exact", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int rows = 7, cols = 300, stride = 320;
  const std::vector<float> y = RandomFloats(static_cast<size_t>(rows) * stride, 10);
  const std::vector<float> x = RandomFloats(y.size(), 11);
  const std::vector<float> bias = RandomFloats(cols, 12);

  DeviceArray<float> y_dev(y), x_dev(x), bias_dev(bias);
  RequireOk(cuda::AddInPlace(y_dev.get(), x_dev.get(), y.size(), nullptr));
  RequireOk(cuda::AddBias(y_dev.get(), bias_dev.get(), rows, cols, stride, nullptr));
  RequireSynced();
  std::vector<float> want = y;
  for (size_t i = 0; i < want.size(); ++i) want[i] += x[i];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) want[r * stride + c] += bias[c];
  }
  CheckClose(y_dev.ToHost(), want, 0, 0, "AddInPlace + AddBias");

  std::vector<DeviceArray<float>> dst;
  std::vector<float*> dst_ptrs;
  for (int r = 0; r < rows; ++r) {
    dst.emplace_back(cols);
    dst_ptrs.push_back(dst.back().get());
  }
  DeviceArray<float*> ptrs_dev(dst_ptrs);
  RequireOk(cuda::ScatterRows(y_dev.get(), stride, ptrs_dev.get(), rows, cols, nullptr));
  RequireSynced();
  for (int r = 0; r < rows; ++r) {
    const std::vector<float> row(want.begin() + r * stride, want.begin() + r * stride + cols);
    CheckClose(dst[r].ToHost(), row, 0, 0, "ScatterRows row " + std::to_string(r));
  }
}

TEST_CASE("CUDA NegLogLikelihood matches cpu::NegLogLikelihood", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  for (int vocab : {512, 32000, 128256}) {
    INFO("vocab " << vocab);
    const int rows = 6;
    const std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 13, 12.0f);
    const std::vector<int32_t> targets = testing::RandomInts(rows, 14, vocab);
    std::vector<float> want(rows);
    cpu::NegLogLikelihood(logits.data(), targets.data(), want.data(), rows, vocab);
    DeviceArray<float> logits_dev(logits), out_dev(rows);
    DeviceArray<int32_t> targets_dev(targets);
    RequireOk(cuda::NegLogLikelihood(logits_dev.get(), targets_dev.get(), out_dev.get(), rows,
                                     vocab, nullptr));
    RequireSynced();
    CheckClose(out_dev.ToHost(), want, kF32Atol, kF32Rtol, "NegLogLikelihood");
  }
}

TEST_CASE("CUDA ArgmaxRows matches scd::ArgMax, lowest index on ties", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int rows = 5, vocab = 50000;
  std::vector<float> logits = RandomFloats(static_cast<size_t>(rows) * vocab, 15);
  logits[0 * vocab + 40000] = 5.0f;  // ties: the lower index must win
  logits[0 * vocab + 12345] = 5.0f;
  logits[1 * vocab + vocab - 1] = 9.0f;                           // last element
  logits[2 * vocab + 0] = 9.0f;                                   // first element
  for (int j = 0; j < vocab; ++j) logits[3 * vocab + j] = -1.0f;  // all equal -> 0
  DeviceArray<float> logits_dev(logits);
  DeviceArray<int32_t> out_dev(rows);
  RequireOk(cuda::ArgmaxRows(logits_dev.get(), out_dev.get(), rows, vocab, nullptr));
  RequireSynced();
  const std::vector<int32_t> got = out_dev.ToHost();
  for (int r = 0; r < rows; ++r) {
    INFO("row " << r);
    CHECK(got[r] == ArgMax(absl::MakeConstSpan(logits.data() + r * vocab, vocab)));
  }
  CHECK(got[0] == 12345);
}

TEST_CASE("CUDA FillRandomBf16 is deterministic with the requested spread", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int64_t n = 1 << 18;  // the mean's standard error is 4e-5, its spread's 0.14%
  DeviceArray<Bf16> a(n), b(n), c(n);
  RequireOk(cuda::FillRandomBf16(a.get(), n, 42, 0.02f, nullptr));
  RequireOk(cuda::FillRandomBf16(b.get(), n, 42, 0.02f, nullptr));
  RequireOk(cuda::FillRandomBf16(c.get(), n, 43, 0.02f, nullptr));
  RequireSynced();
  const std::vector<float> va = Widen(a.ToHost()), vb = Widen(b.ToHost()), vc = Widen(c.ToHost());
  CHECK(va == vb);
  CHECK(va != vc);
  double sum = 0, sum2 = 0;
  for (float v : va) {
    sum += v;
    sum2 += static_cast<double>(v) * v;
  }
  const double mean = sum / n, stddev = std::sqrt(sum2 / n - mean * mean);
  CHECK(std::abs(mean) < 1e-4);
  CHECK(std::abs(stddev - 0.02) < 0.02 * 0.01);
}

}  // namespace scd
