// The rate ladder: REUSE codes are nested (a rank-r code truncated to r' is the rank-r' fit),
// the ladder's rungs, calibration's quality record (saved and loaded with the artifact), and
// payloads at a rung: the header names it, its blocks carry the rung's ranks and patches, the
// consumer rebuilds it, and refuses a rung its artifact lacks.
#include "common/scd/rate_ladder.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "common/scd/calibration.h"
#include "common/scd/codec.h"
#include "common/scd/reduced_rank.h"
#include "tests/scd/scd_fixtures.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using testing::Cpu;
using testing::Load;
using testing::SampledPassages;

// Rows of y = x·W + noise, x with decaying scales, so that the fit has distinct singular values.
CrossMoments CorrelatedMoments(int p, int q, int rows, std::vector<float>* x_out) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> w(static_cast<size_t>(p) * q);
  for (float& v : w) v = n(rng);
  std::vector<float> x(static_cast<size_t>(rows) * p), y(static_cast<size_t>(rows) * q, 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < p; ++i) x[static_cast<size_t>(r) * p + i] = n(rng) / (1.0f + i) + 0.3f;
    for (int j = 0; j < q; ++j) {
      float s = 0.1f * n(rng);
      for (int i = 0; i < p; ++i)
        s += x[static_cast<size_t>(r) * p + i] * w[static_cast<size_t>(i) * q + j];
      y[static_cast<size_t>(r) * q + j] = s;
    }
  }
  CrossMoments m(p, q);
  m.Add(x.data(), y.data(), rows);
  *x_out = std::move(x);
  return m;
}

double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double{a[i]} - b[i]));
  return m;
}

TEST_CASE("A rank-r REUSE code truncated to r' is the rank-r' fit", "[cpu]") {
  std::vector<float> x;
  const CrossMoments m = CorrelatedMoments(24, 20, 400, &x);
  auto full = m.Fit(12, 1e-4);
  REQUIRE(full.ok());
  const int rows = 50;
  for (int r : {1, 4, 8, 11}) {
    auto small = m.Fit(r, 1e-4);
    REQUIRE(small.ok());
    std::vector<float> z_trunc(static_cast<size_t>(rows) * r), z_small(z_trunc.size());
    full->Encode(x.data(), rows, z_trunc.data(), r);
    small->Encode(x.data(), rows, z_small.data());
    INFO("r' = " << r);
    CHECK(MaxAbs(z_trunc, z_small) < 1e-4);
    std::vector<float> y_trunc(static_cast<size_t>(rows) * 20), y_small(y_trunc.size());
    full->Decode(z_trunc.data(), rows, y_trunc.data(), r);
    small->Decode(z_small.data(), rows, y_small.data());
    CHECK(MaxAbs(y_trunc, y_small) < 1e-4);
  }
  // And the whole rank is the default.
  std::vector<float> z_all(static_cast<size_t>(rows) * 12), z_default(z_all.size());
  full->Encode(x.data(), rows, z_all.data(), 12);
  full->Encode(x.data(), rows, z_default.data());
  CHECK(z_all == z_default);
}

TEST_CASE("The ladder: the artifact's point first, then smaller ranks and fewer patches", "[cpu]") {
  const std::vector<Rung> ladder = RateLadder(16, 24, 3);
  REQUIRE(ladder.size() == 16);
  CHECK(ladder[0] == Rung{16, 24, 3});
  CHECK(ladder[3] == Rung{16, 24, 0});
  CHECK(ladder[4] == Rung{12, 18, 3});
  CHECK(ladder[8] == Rung{8, 12, 3});
  CHECK(ladder[15] == Rung{4, 6, 0});
  CHECK(RungName(ladder[5]) == "r12/18 k2");
  // Ranks that round to the same rung appear once.
  CHECK(RateLadder(1, 1, 0).size() == 1);
  CHECK(RateLadder(2, 2, 1).size() == 4);  // ranks 2 and 1, with 1 and 0 patches
}

TEST_CASE("Quality records round-trip through JSON and refuse bad entries", "[cpu]") {
  const std::vector<QualityRecord> records = {{"raw", 0, 0.08, 0.71, 520.5},
                                              {"scd", 3, 0.11, 0.93, 160.25}};
  auto back = QualityRecordsFromJson(QualityRecordsToJson(records));
  REQUIRE(back.ok());
  CHECK(*back == records);
  nlohmann::json bad = QualityRecordsToJson(records);
  bad[1]["top1"] = 1.5;
  CHECK(testing::StatusHas(QualityRecordsFromJson(bad).status(), "entry 1: top1 above 1"));
  bad[1].erase("top1");
  CHECK(testing::StatusHas(QualityRecordsFromJson(bad).status(), "entry 1"));
  CHECK_FALSE(QualityRecordsFromJson(nlohmann::json::object()).ok());
}

TEST_CASE("Calibration records every baseline and rung; payloads travel at any rung",
          "[cpu][slow]") {
  auto producer_model = Load("models/stories260K");
  auto consumer_model = Load("models/stories260K-babi-qa");
  const ScdArtifact& quick = testing::BundledQuickArtifact();
  const std::string path = testing::TempDir() + "/ladder.safetensors";
  ScdArtifact saved = quick;
  REQUIRE(saved.Save(path).ok());
  auto loaded = ScdArtifact::Load(path);
  REQUIRE(loaded.ok());
  CHECK(loaded->quality == quick.quality);
  auto artifact = std::make_shared<const ScdArtifact>(std::move(loaded).value());

  // oracle, raw, quant8, quant4, recompute, then each rung of scd.
  const std::vector<Rung> ladder = RateLadder(*artifact);
  REQUIRE(artifact->quality.size() == 5 + ladder.size());
  CHECK(artifact->quality[0].mode == "oracle");
  CHECK(artifact->quality[0].kl < 1e-6);
  CHECK(artifact->quality[0].top1 == 1.0);
  CHECK(artifact->quality[1].mode == "raw");
  std::vector<double> scd_bytes;
  for (size_t i = 5; i < artifact->quality.size(); ++i) {
    CHECK(artifact->quality[i].mode == "scd");
    CHECK(artifact->quality[i].rung == static_cast<int>(i - 5));
    scd_bytes.push_back(artifact->quality[i].bytes_per_token);
  }
  // Payloads shrink with the ranks at every patch budget; rung 0 is smaller than raw.
  const size_t per_rank = static_cast<size_t>(artifact->patch_budget) + 1;
  for (size_t i = 0; i + per_rank < scd_bytes.size(); ++i) {
    CHECK(scd_bytes[i + per_rank] < scd_bytes[i]);
  }
  CHECK(scd_bytes[0] < 0.5 * artifact->quality[1].bytes_per_token);

  auto producer = Cpu(producer_model);
  auto consumer = Cpu(consumer_model);
  auto enc = ProducerCodec::Create(producer_model, consumer_model->digest(), artifact).value();
  auto dec = ConsumerCodec::Create(consumer_model, producer_model->digest(), artifact).value();
  const std::vector<int32_t> tokens = SampledPassages(*producer, 1, 48, 77)[0];
  PrefillResult states;
  auto pseq = producer->NewSequence(64).value();
  REQUIRE(producer->Prefill(*pseq, tokens, ProducerPrefillOptions(CodecMode::kScd), &states).ok());
  for (size_t i = 0; i < ladder.size(); ++i) {
    INFO("rung " << i << " " << RungName(ladder[i]));
    auto payload = enc->Encode(CodecMode::kScd, tokens, states, 0, static_cast<int>(i));
    REQUIRE(payload.ok());
    auto parsed = ParsePayload(SerializePayload(*payload));
    REQUIRE(parsed.ok());
    CHECK(parsed->rung == i);
    int patches = 0;
    for (const PayloadBlock& b : parsed->blocks) {
      if (b.kind == BlockKind::kKey) CHECK(static_cast<int>(b.cols) == ladder[i].rank_k);
      if (b.kind == BlockKind::kValue) CHECK(static_cast<int>(b.cols) == ladder[i].rank_v);
      if (b.kind == BlockKind::kPatch) {
        CHECK(b.layer == artifact->patch_order[patches]);
        ++patches;
      }
    }
    CHECK(patches == ladder[i].patch_layers);
    auto cseq = consumer->NewSequence(64).value();
    CHECK(dec->Rebuild(*parsed, *consumer, *cseq).ok());
    CHECK(cseq->length() == static_cast<int>(tokens.size()));
  }
  // The default rung is the artifact's own point, byte for byte.
  CHECK(SerializePayload(enc->Encode(CodecMode::kScd, tokens, states).value()) ==
        SerializePayload(enc->Encode(CodecMode::kScd, tokens, states, 0, 0).value()));

  // A rung the ladder lacks, asked or received; a rung on a mode without one.
  const int past = static_cast<int>(ladder.size());
  CHECK(testing::StatusHas(enc->Encode(CodecMode::kScd, tokens, states, 0, past).status(),
                           "is not on this artifact's"));
  CHECK(testing::StatusHas(enc->Encode(CodecMode::kRaw, tokens, states, 0, 1).status(),
                           "rungs are scd's and scd-reuse's"));
  Payload forged = enc->Encode(CodecMode::kScd, tokens, states).value();
  forged.rung = static_cast<uint16_t>(past);
  auto cseq = consumer->NewSequence(64).value();
  CHECK(dec->Rebuild(forged, *consumer, *cseq).code() == absl::StatusCode::kInvalidArgument);
  Payload raw = enc->Encode(CodecMode::kRaw, tokens, states).value();
  raw.rung = 2;
  CHECK(testing::StatusHas(ParsePayload(SerializePayload(raw)).status(), "names rung 2"));
}

}  // namespace
}  // namespace scd
