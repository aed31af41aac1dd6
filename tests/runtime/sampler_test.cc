// Sampler invariants: greedy is argmax; a seed fixes the draw; top-k and top-p never return
// a token outside their candidate set; empirical frequencies follow softmax(logits / T).
#include "common/runtime/sampler.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>

namespace scd {

TEST_CASE("Greedy sampling is argmax with lowest-index ties", "[cpu]") {
  Sampler s(SamplingParams{});
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
  CHECK(s.Sample(logits) == 1);
  CHECK(ArgMax(logits) == 1);
}

TEST_CASE("Seeded sampling is reproducible and respects top-k and top-p", "[cpu]") {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  for (int i = 0; i < 50; ++i) CHECK(a.Sample(logits) == b.Sample(logits));

  p.top_k = 2;
  Sampler k(p);
  for (int i = 0; i < 200; ++i) {
    const int t = k.Sample(logits);
    CHECK((t == 0 || t == 1));
  }
  p.top_k = 0;
  p.top_p = 0.5f;  // softmax mass of token 0 alone is ~0.53 >= 0.5
  Sampler nucleus(p);
  for (int i = 0; i < 200; ++i) CHECK(nucleus.Sample(logits) == 0);
}

TEST_CASE("Sampling frequencies follow softmax(logits / temperature)", "[cpu]") {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f};
  SamplingParams p;
  p.temperature = 2.0f;
  p.seed = 7;
  Sampler s(p);
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.Sample(logits)]++;
  double z = 0;
  for (float l : logits) z += std::exp(l / 2.0);
  for (int t = 0; t < 3; ++t) {
    const double want = std::exp(logits[t] / 2.0) / z;
    CHECK(counts[t] / double(n) == Approx(want).margin(0.015));
  }
}

TEST_CASE("Invalid sampling parameters are rejected by name", "[cpu]") {
  SamplingParams p;
  p.temperature = -1;
  CHECK(p.Validate().message().find("temperature") != std::string::npos);
  p = {};
  p.top_p = 0;
  CHECK(p.Validate().message().find("top_p") != std::string::npos);
  p = {};
  p.top_k = -2;
  CHECK(p.Validate().message().find("top_k") != std::string::npos);
}

}  // namespace scd
