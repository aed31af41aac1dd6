// Helpers for the [cuda] parity tests: skipping with a visible message when no GPU is present
// (docs/STYLE.md: a [cuda] test never passes silently), device arrays, seeded random inputs,
// BF16 rounding of inputs for the CPU twins, and element-wise comparison at explicit tolerances.
#ifndef SCD_TESTS_GPU_PARITY_CUDA_TEST_SUPPORT_H_
#define SCD_TESTS_GPU_PARITY_CUDA_TEST_SUPPORT_H_

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/runtime/cuda/cuda_backend.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/ops.h"

// Ends the current test case with a WARN when this machine has no usable CUDA device, saying
// why (CudaDeviceStatus). Catch2 v2 has no SKIP, so the warning is the visible record;
// scripts/gpu_check.sh runs these on a GPU and counts the "no CUDA device: skipping" lines.
#define SCD_SKIP_WITHOUT_CUDA()                                                             \
  do {                                                                                      \
    if (const absl::Status scd_device = ::scd::CudaDeviceStatus(); !scd_device.ok()) {      \
      WARN("no CUDA device: skipping '" << ::Catch::getResultCapture().getCurrentTestName() \
                                        << "' (" << scd_device.message()                    \
                                        << "; run scripts/gpu_check.sh on a GPU host)");    \
      return;                                                                               \
    }                                                                                       \
  } while (0)

namespace scd::testing {

// Uniform(-scale, scale) floats from a fixed seed.
std::vector<float> RandomFloats(size_t count, uint64_t seed, float scale = 1.0f);
// Uniform ints in [0, bound).
std::vector<int32_t> RandomInts(size_t count, uint64_t seed, int32_t bound);

std::vector<cuda::Bf16> ToBf16(const std::vector<float>& x);
// x with every element rounded through BF16 (what a kernel reading BF16 sees).
std::vector<float> RoundedBf16(const std::vector<float>& x);
// BF16 values as floats.
std::vector<float> Widen(const std::vector<cuda::Bf16>& x);

// x[begin, begin + count).
template <typename T>
std::vector<T> Slice(const std::vector<T>& x, size_t begin, size_t count) {
  return std::vector<T>(x.begin() + begin, x.begin() + begin + count);
}

// A typed device array for tests; failures end the test (REQUIRE).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    auto buffer = cuda::DeviceBuffer::Allocate(count * sizeof(T), "test array");
    INFO(buffer.status());
    REQUIRE(buffer.ok());
    buffer_ = std::move(buffer).value();
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    const absl::Status s = cuda::CopyToDeviceSync(buffer_.data(), host.data(), Bytes());
    INFO(s);
    REQUIRE(s.ok());
  }
  T* get() const { return buffer_.as<T>(); }
  size_t size() const { return count_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(count_);
    const absl::Status s = cuda::CopyToHostSync(host.data(), buffer_.data(), Bytes());
    INFO(s);
    REQUIRE(s.ok());
    return host;
  }

 private:
  size_t Bytes() const { return count_ * sizeof(T); }
  size_t count_;
  cuda::DeviceBuffer buffer_;
};

// Waits for the default stream and fails the test when a launch or the wait failed.
void RequireOk(const absl::Status& status);
void RequireSynced();

// `count` sequence caches in the KV cache layout of kernels/cuda/ops.h, K and V of `elems`
// BF16 each, filled with `fill` (a sentinel the tests check unwritten slots against), and the
// KvCacheTable that points at them, with `layer_stride` elements between layers.
class TestKvCaches {
 public:
  TestKvCaches(int count, size_t elems, int64_t layer_stride, float fill);
  const cuda::KvCacheTable& table() const { return table_; }
  std::vector<cuda::Bf16> K(int seq) const { return k_[seq].ToHost(); }
  std::vector<cuda::Bf16> V(int seq) const { return v_[seq].ToHost(); }

 private:
  std::vector<DeviceArray<cuda::Bf16>> k_, v_;
  std::unique_ptr<DeviceArray<cuda::Bf16*>> k_ptrs_, v_ptrs_;
  std::unique_ptr<DeviceArray<int64_t>> strides_;
  cuda::KvCacheTable table_;
};

// The small synthetic model of the backend parity tests: d 128, 2 layers, 4/2 heads of 64 (the
// tensor-core attention path), vocab 300, 256 positions; Qwen2 with QKV bias, Mistral with a
// window of 16.
ModelConfig ParityConfig(Architecture arch);

// A model under ../shared (REQUIREs that it loads) and a backend of `kind` for it.
std::shared_ptr<const Model> LoadSharedModel(const std::string& relative);
std::unique_ptr<Backend> MakeBackend(BackendKind kind, std::shared_ptr<const Model> model);

// The largest logit's lead over the runner-up (greedy decisions closer than a backend's error
// may legitimately go either way).
float TopTwoMargin(const float* logits, int vocab);

struct Mismatch {
  size_t count = 0;    // elements outside atol + rtol * |want|
  size_t worst = 0;    // index of the largest excess
  double max_abs = 0;  // largest |got - want|
  double max_rel = 0;  // largest |got - want| / max(|want|, 1e-30)
};
Mismatch CompareClose(const std::vector<float>& got, const std::vector<float>& want, double atol,
                      double rtol);

// The tolerances of a value a kernel stores as BF16: one BF16 ulp of the stored value at most
// (relative: 2^-7 / m for a mantissa m in [1, 2)), with an absolute floor for values near 0.
// Whole-model parity against the CPU reference: logits within these absolute errors (max and
// mean; BF16 weights and activations), surprisal within kSurprisalMaxAbs, and greedy choices
// equal wherever the reference's top two logits are further apart than kGreedyMargin.
inline constexpr double kLogitMaxAbs = 0.6, kLogitMeanAbs = 0.06, kSurprisalMaxAbs = 0.25;
inline constexpr float kGreedyMargin = 0.6f;

inline constexpr double kBf16StoreRtol = 1.0 / 128;
inline constexpr double kBf16StoreAtol = 1e-5;
// What the tests fill the slots a kernel must not write with: exact in BF16.
inline constexpr float kSentinel = -7.0f;

// CHECKs every element within atol + rtol * |want|; the message names `what`, the worst
// element and the error statistics.
void CheckClose(const std::vector<float>& got, const std::vector<float>& want, double atol,
                double rtol, const std::string& what);

// CHECKs max |got - want| <= max_abs and mean |got - want| <= mean_abs over a logit vector
// (NaN counts as infinite); the message names `what` and both statistics.
void CheckLogits(const std::vector<float>& got, const std::vector<float>& want, double max_abs,
                 double mean_abs, const std::string& what);

}  // namespace scd::testing

#endif  // SCD_TESTS_GPU_PARITY_CUDA_TEST_SUPPORT_H_
