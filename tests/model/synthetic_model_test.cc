// MakeSyntheticModel: deterministic in (config, seed, init_std), the right distribution, and
// usable at benchmark shapes (a stories110M-shaped model builds; its time is reported).
#include <time.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>

#include "common/model/weight_layout.h"
#include "common/model/weights.h"
#include "tests/model/tiny_config.h"

namespace scd {
namespace {

TEST_CASE("Synthetic models are deterministic in seed and init_std", "[cpu]") {
  const ModelConfig config = testing::TinyConfig(Architecture::kQwen2);
  auto a = MakeSyntheticModel(config, 1), b = MakeSyntheticModel(config, 1);
  auto c = MakeSyntheticModel(config, 2), d = MakeSyntheticModel(config, 1, 0.03f);
  REQUIRE(a != nullptr);
  CHECK(a->digest() == b->digest());
  CHECK(a->weights.layers[2].w_up == b->weights.layers[2].w_up);
  CHECK(a->weights.layers[2].bq == b->weights.layers[2].bq);
  CHECK(a->digest() != c->digest());
  CHECK(a->weights.embed != c->weights.embed);
  CHECK(a->digest() != d->digest());
  CHECK(a->digest() == ComputeModelDigest(a->config, a->weights));
  CHECK(a->dir.empty());
  // Tensors draw from distinct streams.
  CHECK(a->weights.layers[0].wk != a->weights.layers[0].wv);
  CHECK(a->weights.layers[0].w_gate != a->weights.layers[1].w_gate);
}

TEST_CASE("Synthetic weights are N(0, init_std^2) with unit norm gains", "[cpu]") {
  ModelConfig config = testing::TinyConfig();
  config.hidden_size = 256;
  config.intermediate_size = 512;
  auto model = MakeSyntheticModel(config, 9, 0.05f);
  REQUIRE(model != nullptr);
  for (const WeightEntry& entry : WeightLayout(config)) {
    const WeightBuffer& data = WeightData(model->weights, entry);
    REQUIRE(static_cast<int64_t>(data.size()) == entry.NumElements());
    if (entry.is_norm()) {
      for (float v : data) REQUIRE(v == 1.0f);
      continue;
    }
    if (data.size() < 10000) continue;
    double sum = 0, sum2 = 0;
    for (float v : data) {
      sum += v;
      sum2 += double{v} * v;
    }
    const double mean = sum / data.size();
    INFO(entry.name);
    CHECK(std::fabs(mean) < 0.002);
    CHECK(std::sqrt(sum2 / data.size() - mean * mean) == Approx(0.05).epsilon(0.03));
  }
}

TEST_CASE("Invalid configs give no synthetic model", "[cpu]") {
  ModelConfig config = testing::TinyConfig();
  config.num_kv_heads = 3;
  CHECK(MakeSyntheticModel(config, 1) == nullptr);
}

// How long the build takes is reported, not asserted (a timed assertion fails on a loaded
// machine: this one once took 2.11 s of CPU against a 2 s bound in CI); only a hang fails.
TEST_CASE("A stories110M-shaped synthetic model builds, with its time reported", "[cpu]") {
  ModelConfig config;
  config.name = "stories110M-shape";
  config.hidden_size = 768;
  config.num_layers = 12;
  config.num_heads = 12;
  config.num_kv_heads = 12;
  config.head_dim = 64;
  config.intermediate_size = 2048;
  config.vocab_size = 32000;
  config.max_position_embeddings = 1024;
  config.tie_word_embeddings = true;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = testing::ProcessCpuSeconds();
  auto model = MakeSyntheticModel(config, 110);
  const double cpu = testing::ProcessCpuSeconds() - cpu_start;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(model != nullptr);
  WARN("stories110M-shaped synthetic model: " << cpu << " s CPU (all threads), " << wall
                                              << " s wall");
  CHECK(model->weights.ParameterCount() == 109529856);
  CHECK(model->digest().size() == 64);
  if (testing::kOptimizedBuild) {
    CHECK(wall < 20.0);  // only guards against hangs: shared machines stall us
  }
}

}  // namespace
}  // namespace scd
