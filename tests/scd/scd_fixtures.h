// Shared fixtures for the SCD tests: real checkpoints on CPU backends, passages sampled from
// the producer (no tokenizer needed), and a quickly calibrated artifact for the bundled pair.
#ifndef SCD_TESTS_SCD_SCD_FIXTURES_H_
#define SCD_TESTS_SCD_SCD_FIXTURES_H_

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/runtime/backend.h"
#include "common/runtime/generate.h"
#include "common/scd/calibration.h"
#include "tests/test_support.h"

namespace scd::testing {

inline std::shared_ptr<const Model> Load(const std::string& rel) {
  auto m = LoadModel(SharedPath(rel));
  INFO(m.status());
  REQUIRE(m.ok());
  return *m;
}

inline std::unique_ptr<Backend> Cpu(std::shared_ptr<const Model> m) {
  auto b = CreateBackend(BackendKind::kCpu, std::move(m));
  REQUIRE(b.ok());
  return std::move(b).value();
}

// Passages sampled from `b` itself: BOS then `len` tokens at temperature 1.
inline std::vector<std::vector<int32_t>> SampledPassages(Backend& b, int count, int len,
                                                         uint64_t seed) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    GenerateOptions g;
    g.max_new_tokens = len;
    g.sampling.temperature = 1.0f;
    g.sampling.seed = seed + i;
    g.stop_ids.assign(1, -1);  // never stop at EOS (not `= {-1}`: GCC 12 warns -Wnonnull there)
    const std::vector<int32_t> bos = {1};
    auto r = Generate(b, bos, g);
    REQUIRE(r.ok());
    std::vector<int32_t> p = {1};
    p.insert(p.end(), r->tokens.begin(), r->tokens.end());
    out.push_back(p);
  }
  return out;
}

// The options of a small but real calibration (int8 codes, patch budget 1).
inline CalibrationOptions QuickOptions() {
  CalibrationOptions o;
  o.rank_k = 16;
  o.rank_v = 24;
  o.rank_h = 32;
  o.patch_budget = 1;
  o.code_encoding = Encoding::kInt8Row;
  o.holdout_passages = 12;
  o.aligner.steps = 300;
  return o;
}

// A small but real calibration of producer → consumer (QuickOptions).
inline ScdArtifact QuickArtifact(Backend& producer, Backend& consumer) {
  auto artifact =
      Calibrate(producer, consumer, SampledPassages(producer, 60, 96, 7), QuickOptions());
  INFO(artifact.status());
  REQUIRE(artifact.ok());
  return std::move(artifact).value();
}

// QuickArtifact of the bundled pair (stories260K → stories260K-babi-qa), calibrated once per
// test binary and shared by its cases.
inline const ScdArtifact& BundledQuickArtifact() {
  static const ScdArtifact* artifact = [] {
    auto producer = Cpu(Load("models/stories260K"));
    auto consumer = Cpu(Load("models/stories260K-babi-qa"));
    return new ScdArtifact(QuickArtifact(*producer, *consumer));
  }();
  return *artifact;
}

}  // namespace scd::testing

#endif  // SCD_TESTS_SCD_SCD_FIXTURES_H_
