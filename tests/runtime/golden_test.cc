// Golden tests of the CPU backend against ../shared/golden/stories260K.{json,safetensors},
// produced by an independent reference implementation of the HF Llama forward pass.
// Tolerances: 1e-4 max abs on logits, per-layer H_in/K/V and surprisal;
// greedy continuations identical.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/model/safetensors.h"
#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/runtime/generate.h"
#include "kernels/cpu/ops.h"
#include "tests/runtime/runtime_fixtures.h"
#include "tests/test_support.h"

namespace scd {
namespace {

constexpr float kTol = 1e-4f;

struct Golden {
  nlohmann::json json;
  std::unique_ptr<SafetensorsFile> tensors;
};

const Golden& LoadGolden() {
  static Golden* golden = [] {
    auto* g = new Golden;
    g->json = nlohmann::json::parse(
        testing::ReadFileOrFail(testing::SharedPath("golden/stories260K.json")));
    auto file = SafetensorsFile::Open(testing::SharedPath("golden/stories260K.safetensors"));
    REQUIRE(file.ok());
    g->tensors = std::move(file).value();
    return g;
  }();
  return *golden;
}

std::vector<float> GoldenTensor(const std::string& name) {
  auto t = LoadGolden().tensors->ReadAsFloat(name);
  INFO(name << ": " << t.status());
  REQUIRE(t.ok());
  return std::move(t).value();
}

float MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST_CASE("CPU prefill matches golden logits, surprisal and layer states", "[cpu]") {
  auto backend = testing::MakeBackend("models/stories260K");
  const auto& prompts = LoadGolden().json.at("prompts");
  REQUIRE(prompts.size() >= 1);
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<int32_t> ids = prompts[p].at("ids").get<std::vector<int32_t>>();
    auto seq = backend->NewSequence(512).value();
    PrefillResult r;
    PrefillOptions opts;
    opts.all_logits = true;
    opts.surprisal = true;
    opts.layer_states = true;
    REQUIRE(backend->Prefill(*seq, ids, opts, &r).ok());
    const std::string prefix = "p" + std::to_string(p) + ".";
    INFO("prompt " << p);
    CHECK(MaxAbs(r.logits, GoldenTensor(prefix + "logits")) < kTol);
    CHECK(MaxAbs(r.surprisal, GoldenTensor(prefix + "surprisal")) < kTol);
    if (p != 0) continue;
    const ModelConfig& c = backend->model().config;
    const std::vector<float> inv_freq = RopeInverseFrequencies(c);
    std::vector<int32_t> positions(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<int32_t>(i);
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string layer = prefix + "layer" + std::to_string(l) + ".";
      INFO("layer " << l);
      CHECK(MaxAbs(r.layers[l].h_in, GoldenTensor(layer + "h_in")) < kTol);
      CHECK(MaxAbs(r.layers[l].k_pre_rope, GoldenTensor(layer + "k_pre_rope")) < kTol);
      CHECK(MaxAbs(r.layers[l].v, GoldenTensor(layer + "v")) < kTol);
      std::vector<float> k = r.layers[l].k_pre_rope;
      cpu::ApplyRope(k.data(), static_cast<int>(ids.size()), c.num_kv_heads, c.head_dim,
                     positions.data(), inv_freq.data());
      CHECK(MaxAbs(k, GoldenTensor(layer + "k")) < kTol);
    }
  }
}

TEST_CASE("CPU greedy continuations equal the golden ones", "[cpu]") {
  auto backend = testing::MakeBackend("models/stories260K");
  for (const auto& prompt : LoadGolden().json.at("prompts")) {
    std::vector<int32_t> ids = prompt.at("ids").get<std::vector<int32_t>>();
    std::vector<int32_t> want = prompt.at("greedy_ids").get<std::vector<int32_t>>();
    GenerateOptions options;
    options.max_new_tokens = 40;
    auto result = Generate(*backend, ids, options);
    REQUIRE(result.ok());
    CHECK(result->tokens == want);
  }
}

}  // namespace scd
