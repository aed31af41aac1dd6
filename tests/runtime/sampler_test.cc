// Sampler invariants: greedy is argmax; a seed fixes the draw; top-k and top-p never return
// a token outside their candidate set; empirical frequencies follow softmax(logits / T).
#include "common/runtime/sampler.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <random>
#include <utility>
#include <vector>

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

namespace {

// The sampler as first written, drawing with uniform_real_distribution(0, kept mass): the
// reference for the draw contract below.
int32_t SampleAsWritten(const std::vector<float>& logits, const SamplingParams& p,
                        std::mt19937_64* rng) {
  std::vector<std::pair<float, int32_t>> s(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    s[i] = {logits[i] / p.temperature, static_cast<int32_t>(i)};
  }
  std::sort(s.begin(), s.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  int keep =
      p.top_k > 0 && p.top_k < static_cast<int>(s.size()) ? p.top_k : static_cast<int>(s.size());
  const float max_v = s[0].first;
  double total = 0;
  for (int i = 0; i < keep; ++i) total += s[i].first = std::exp(s[i].first - max_v);
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < keep; ++i) {
      cum += s[i].first / total;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    total = 0;
    for (int i = 0; i < keep; ++i) total += s[i].first;
  }
  double u = std::uniform_real_distribution<double>(0.0, total)(*rng);
  for (int i = 0; i < keep; ++i) {
    if ((u -= s[i].first) <= 0.0) return s[i].second;
  }
  return s[keep - 1].second;
}

}  // namespace

TEST_CASE("A sampler's draw is generate_canonical scaled by the kept mass", "[cpu]") {
  // The contract the device sampler (SampleRows) is built on: SampleWithDraw with the
  // generator's canonical draw picks what a uniform draw over the kept mass picks, token for
  // token, so seeded outputs are the same on the CPU and on the GPU.
  std::mt19937_64 gen(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(300);
  const SamplingParams settings[] = {
      {0.7f, 0, 1.0f, 11}, {1.3f, 40, 1.0f, 12}, {1.0f, 0, 0.9f, 13}, {0.5f, 25, 0.6f, 14}};
  for (const SamplingParams& p : settings) {
    Sampler sampler(p), drawing(p);
    std::mt19937_64 reference_rng(p.seed), draw_rng(p.seed);
    for (int step = 0; step < 200; ++step) {
      for (float& x : logits) x = normal(gen);
      const int32_t want = SampleAsWritten(logits, p, &reference_rng);
      const double canonical = std::generate_canonical<double, 53>(draw_rng);
      INFO("temperature " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p
                          << " step " << step);
      REQUIRE(sampler.Sample(logits) == want);
      REQUIRE(SampleWithDraw(logits, p, canonical) == want);
      const SampleDraw draw = drawing.Draw();  // taken before the logits, as the engine does
      REQUIRE(draw.canonical == canonical);
      REQUIRE(SampleWithDraw(logits, draw.params, draw.canonical) == want);
    }
  }
}

}  // namespace scd
