// See cuda_test_support.h.
#include "tests/gpu/parity/cuda_test_support.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "common/model/weights.h"
#include "tests/test_support.h"

namespace scd::testing {

std::vector<float> RandomFloats(size_t count, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> x(count);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<int32_t> RandomInts(size_t count, uint64_t seed, int32_t bound) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, bound - 1);
  std::vector<int32_t> x(count);
  for (int32_t& v : x) v = dist(rng);
  return x;
}

TestKvCaches::TestKvCaches(int count, size_t elems, int64_t layer_stride, float fill) {
  const std::vector<cuda::Bf16> filled(elems, cuda::FloatToBf16(fill));
  std::vector<cuda::Bf16*> k_ptrs, v_ptrs;
  for (int s = 0; s < count; ++s) {
    k_.emplace_back(filled);
    v_.emplace_back(filled);
    k_ptrs.push_back(k_.back().get());
    v_ptrs.push_back(v_.back().get());
  }
  k_ptrs_ = std::make_unique<DeviceArray<cuda::Bf16*>>(k_ptrs);
  v_ptrs_ = std::make_unique<DeviceArray<cuda::Bf16*>>(v_ptrs);
  strides_ = std::make_unique<DeviceArray<int64_t>>(std::vector<int64_t>(count, layer_stride));
  table_.k = k_ptrs_->get();
  table_.v = v_ptrs_->get();
  table_.layer_stride = strides_->get();
}

std::shared_ptr<const Model> LoadSharedModel(const std::string& relative) {
  auto model = LoadModel(SharedPath(relative));
  INFO(relative << ": " << model.status());
  REQUIRE(model.ok());
  return *model;
}

ModelConfig ParityConfig(Architecture arch) {
  ModelConfig c;
  c.arch = arch;
  c.name = "cuda-parity";
  c.hidden_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;  // the tensor-core attention path
  c.intermediate_size = 256;
  c.vocab_size = 300;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5f;
  c.qkv_bias = arch == Architecture::kQwen2;
  c.sliding_window = arch == Architecture::kMistral ? 16 : 0;
  c.eos_token_ids = {2};
  return c;
}

std::unique_ptr<Backend> MakeBackend(BackendKind kind, std::shared_ptr<const Model> model) {
  auto backend = CreateBackend(kind, std::move(model));
  INFO(backend.status());
  REQUIRE(backend.ok());
  return std::move(backend).value();
}

std::vector<cuda::Bf16> ToBf16(const std::vector<float>& x) {
  std::vector<cuda::Bf16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = cuda::FloatToBf16(x[i]);
  return y;
}

std::vector<float> RoundedBf16(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = cuda::RoundToBf16(x[i]);
  return y;
}

std::vector<float> Widen(const std::vector<cuda::Bf16>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = cuda::Bf16ToFloat(x[i]);
  return y;
}

void RequireOk(const absl::Status& status) {
  INFO(status);
  REQUIRE(status.ok());
}

void RequireSynced() { RequireOk(cuda::SynchronizeStream(nullptr)); }

Mismatch CompareClose(const std::vector<float>& got, const std::vector<float>& want, double atol,
                      double rtol) {
  Mismatch m;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    const double bound = atol + rtol * std::abs(static_cast<double>(want[i]));
    const bool bad = !(diff <= bound);  // NaN counts as a mismatch
    m.max_abs = std::max(m.max_abs, diff);
    m.max_rel = std::max(m.max_rel, diff / std::max(std::abs(static_cast<double>(want[i])), 1e-30));
    if (bad) ++m.count;
    const double excess = bad ? (std::isnan(diff) ? 1e300 : diff - bound) : -1;
    if (excess > worst_excess || (worst_excess < 0 && bad)) {
      worst_excess = excess;
      m.worst = i;
    }
  }
  return m;
}

void CheckClose(const std::vector<float>& got, const std::vector<float>& want, double atol,
                double rtol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  const Mismatch m = CompareClose(got, want, atol, rtol);
  INFO(what << ": " << m.count << " of " << got.size() << " elements outside atol " << atol
            << " + rtol " << rtol << "; max abs err " << m.max_abs << ", max rel err "
            << m.max_rel);
  if (m.count > 0) {
    INFO("worst element " << m.worst << ": got " << got[m.worst] << ", want " << want[m.worst]);
    CHECK(m.count == 0);
  } else {
    CHECK(m.count == 0);
  }
}

void CheckLogits(const std::vector<float>& got, const std::vector<float>& want, double max_abs,
                 double mean_abs, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0, sum = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    sum += d;
  }
  const double mean = got.empty() ? 0.0 : sum / got.size();
  INFO(what << ": max |d| " << worst << " (bound " << max_abs << "), mean |d| " << mean
            << " (bound " << mean_abs << ")");
  CHECK(worst <= max_abs);
  CHECK(mean <= mean_abs);
}

float TopTwoMargin(const float* logits, int vocab) {
  float a = -std::numeric_limits<float>::infinity(), b = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < vocab; ++j) {
    if (logits[j] > a) {
      b = a;
      a = logits[j];
    } else if (logits[j] > b) {
      b = logits[j];
    }
  }
  return a - b;
}

}  // namespace scd::testing
