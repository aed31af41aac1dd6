// Parity of the device sampler (SampleRows, kernels/cuda/ops.h) with its CPU twin
// scd::SampleWithDraw (common/runtime/sampler.h), given the same canonical draws: token for
// token. Both sides divide by the temperature with IEEE division, sort by (key desc, id asc),
// take a correctly rounded exp and sum in double; they can only disagree when a draw or the
// top-p target lies within about 1e-12 of a prefix-mass boundary (the sums are associated
// differently), which random draws hit with probability ~1e-9 per row. Greedy rows must be
// the argmax with the lowest id on ties.
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "common/runtime/sampler.h"
#include "kernels/cuda/ops.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

using testing::DeviceArray;
using testing::RequireOk;
using testing::RequireSynced;

std::vector<int32_t> DeviceSample(const std::vector<float>& logits,
                                  const std::vector<cuda::SampleParams>& params, int vocab) {
  const int rows = static_cast<int>(params.size());
  absl::StatusOr<size_t> bytes = cuda::SampleRowsWorkspaceBytes(rows, vocab);
  INFO(bytes.status());
  REQUIRE(bytes.ok());
  DeviceArray<float> logits_dev(logits);
  DeviceArray<cuda::SampleParams> params_dev(params);
  DeviceArray<int32_t> out_dev(std::vector<int32_t>(rows, -1));
  DeviceArray<unsigned char> workspace(*bytes);
  RequireOk(cuda::SampleRows(logits_dev.get(), params_dev.get(), rows, vocab, out_dev.get(),
                             workspace.get(), *bytes, nullptr));
  RequireSynced();
  return out_dev.ToHost();
}

}  // namespace

TEST_CASE("CUDA SampleRows matches SampleWithDraw token for token", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  // Vocabularies of one chunk, several chunks (prefix scans carried across 512-thread chunks)
  // and a real one; rows cycle through greedy, top-k 1, plain temperature, top-k, top-p and
  // both, with logits of spread 3 (peaked) and duplicated values (ties).
  for (int vocab : {512, 5000, 32000}) {
    INFO("vocab " << vocab);
    // Two rows a setting at the real vocabulary (the emulator's race check sorts each row).
    const int rows = vocab > 5000 ? 16 : 48;
    std::mt19937_64 gen(vocab);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (float& x : logits) x = normal(gen);
    for (int r = 0; r < rows; r += 5) {  // ties: a run of equal logits at the top
      float* row = logits.data() + static_cast<size_t>(r) * vocab;
      for (int i = 0; i < 7; ++i) row[i * 3] = 12.0f;
    }
    const cuda::SampleParams settings[] = {{0.0f, 0, 1.0f, 0, 0.0},  {0.8f, 1, 1.0f, 0, 0.0},
                                           {0.7f, 0, 1.0f, 0, 0.0},  {1.3f, 40, 1.0f, 0, 0.0},
                                           {1.0f, 0, 0.9f, 0, 0.0},  {0.5f, 25, 0.6f, 0, 0.0},
                                           {2.0f, 0, 0.99f, 0, 0.0}, {1.0f, 3000, 0.95f, 0, 0.0}};
    std::vector<cuda::SampleParams> params(rows);
    for (int r = 0; r < rows; ++r) {
      params[r] = settings[r % 8];
      params[r].canonical = unit(gen);
    }
    params[2].canonical = 0.0;             // the first kept token
    params[3].canonical = 0.999999999999;  // the last kept token
    const std::vector<int32_t> got = DeviceSample(logits, params, vocab);
    for (int r = 0; r < rows; ++r) {
      const cuda::SampleParams& p = params[r];
      SamplingParams cpu;
      cpu.temperature = p.temperature;
      cpu.top_k = p.top_k;
      cpu.top_p = p.top_p;
      const absl::Span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, vocab);
      INFO("row " << r << ": temperature " << p.temperature << " top_k " << p.top_k << " top_p "
                  << p.top_p << " canonical " << p.canonical);
      CHECK(got[r] == SampleWithDraw(row, cpu, p.canonical));
    }
  }
}

TEST_CASE("CUDA SampleRows refuses a short workspace and an oversized batch", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const std::vector<cuda::SampleParams> params(2);
  DeviceArray<float> logits(std::vector<float>(2 * 100, 0.0f));
  DeviceArray<cuda::SampleParams> params_dev(params);
  DeviceArray<int32_t> out(2);
  DeviceArray<unsigned char> small(16);
  CHECK(
      cuda::SampleRows(logits.get(), params_dev.get(), 2, 100, out.get(), small.get(), 16, nullptr)
          .code() == absl::StatusCode::kInvalidArgument);
  CHECK(!cuda::SampleRowsWorkspaceBytes(1 << 16, 1 << 16).ok());
}

}  // namespace scd
