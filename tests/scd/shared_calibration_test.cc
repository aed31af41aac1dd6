// Calibration on a shared basis with the bundled producer and both bundled specialists: the
// artifacts carry the same encoders and basis id, so one payload (its body byte for byte) is
// what the producer would send to either, and each specialist rebuilds it into the KV its own
// artifact gives; one file holds both (the basis once), and each reads back as its standalone
// artifact; with one consumer the stacked basis fits as well as the pair's own calibration.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>

#include "common/model/safetensors.h"
#include "common/scd/codec.h"
#include "common/scd/shared_artifact.h"
#include "common/scd/shared_calibration.h"
#include "tests/scd/scd_fixtures.h"

namespace scd {
namespace {

using testing::Cpu;
using testing::Load;
using testing::SampledPassages;

// The fixtures' quick calibration with two patch layers, on fewer held-back passages.
CalibrationOptions SharedQuickOptions() {
  CalibrationOptions o = testing::QuickOptions();
  o.patch_budget = 2;
  o.holdout_passages = 8;
  o.aligner.steps = 200;
  return o;
}

// The payload's body: everything but the pair digest, which names the pair it was made for.
std::vector<uint8_t> Body(Payload p) {
  p.pair_digest = {};
  return SerializePayload(p);
}

TEST_CASE("One shared basis: both specialists' payloads are the same bytes", "[cpu]") {
  auto base = Load("models/stories260K");
  auto babi = Load("models/stories260K-babi-qa");
  auto wiki = Load("models/stories260K-wiki");
  auto producer = Cpu(base);
  auto babi_backend = Cpu(babi);
  auto wiki_backend = Cpu(wiki);
  const auto train = SampledPassages(*producer, 40, 96, 21);
  std::vector<SharedConsumer> consumers(2);
  consumers[0].backend = babi_backend.get();
  consumers[0].held = SampledPassages(*babi_backend, 8, 96, 31);
  consumers[1].backend = wiki_backend.get();
  consumers[1].held = SampledPassages(*wiki_backend, 8, 96, 41);
  auto artifacts = CalibrateShared(*producer, consumers, train, SharedQuickOptions(),
                                   SharedBasisKind::kStackedRrr);
  INFO(artifacts.status());
  REQUIRE(artifacts.ok());
  REQUIRE(artifacts->size() == 2);
  const ScdArtifact& a = (*artifacts)[0];
  const ScdArtifact& b = (*artifacts)[1];
  CHECK(a.consumer_digest == babi->digest());
  CHECK(b.consumer_digest == wiki->digest());
  CHECK(a.basis_id.size() == 64);
  CHECK(a.basis_id == b.basis_id);
  CHECK(a.basis_kind == "stacked-rrr");
  for (int l = 0; l < a.num_layers; ++l) {
    CHECK(a.reuse[l].key.encoder == b.reuse[l].key.encoder);
    CHECK(a.reuse[l].value.mu_in == b.reuse[l].value.mu_in);
    CHECK(a.patches.at(l).code.encoder == b.patches.at(l).code.encoder);
    CHECK(a.reuse[l].key.decoder != b.reuse[l].key.decoder);  // each its own decoder
  }
  CHECK_FALSE(a.quality.empty());
  CHECK_FALSE(b.quality.empty());

  // The producer's payloads for either specialist, on the same patch layers.
  auto shared_a = std::make_shared<const ScdArtifact>(a);
  auto shared_b = std::make_shared<const ScdArtifact>(b);
  CodecOptions co;
  co.patch_layers = std::vector<int>{a.patch_order[0], b.patch_order[0]};
  if ((*co.patch_layers)[0] == (*co.patch_layers)[1]) co.patch_layers->pop_back();
  auto enc_a = ProducerCodec::Create(base, babi->digest(), shared_a, co).value();
  auto enc_b = ProducerCodec::Create(base, wiki->digest(), shared_b, co).value();
  const std::vector<int32_t>& context = consumers[0].held[0];
  PrefillResult states;
  auto pseq = producer->NewSequence(128).value();
  REQUIRE(producer->Prefill(*pseq, context, ProducerPrefillOptions(CodecMode::kScd), &states).ok());
  for (CodecMode mode : {CodecMode::kScdReuse, CodecMode::kScd}) {
    INFO(CodecModeName(mode));
    Payload pa = enc_a->Encode(mode, context, states).value();
    const Payload pb = enc_b->Encode(mode, context, states).value();
    CHECK(pa.pair_digest != pb.pair_digest);
    CHECK(Body(pa) == Body(pb));
    // The wiki specialist rebuilds the payload made for the bAbI one (its digest swapped for
    // the wiki pair's, as a basis id on the wire will do) into the KV of its own payload.
    auto dec_b = ConsumerCodec::Create(wiki, base->digest(), shared_b).value();
    auto own = wiki_backend->NewSequence(128).value();
    auto other = wiki_backend->NewSequence(128).value();
    REQUIRE(dec_b->Rebuild(pb, *wiki_backend, *own).ok());
    pa.pair_digest = pb.pair_digest;
    REQUIRE(dec_b->Rebuild(pa, *wiki_backend, *other).ok());
    ExternalKv kv_own, kv_other;
    REQUIRE(wiki_backend->ReadKv(*own, 0, own->length(), &kv_own).ok());
    REQUIRE(wiki_backend->ReadKv(*other, 0, other->length(), &kv_other).ok());
    CHECK(kv_own.k_pre_rope == kv_other.k_pre_rope);
    CHECK(kv_own.v == kv_other.v);
  }

  // The basis survives the artifact's round trip.
  const std::string path = testing::TempDir() + "/shared_basis_babi.safetensors";
  ScdArtifact standalone = a;
  REQUIRE(standalone.Save(path).ok());
  auto loaded = ScdArtifact::Load(path);
  REQUIRE(loaded.ok());
  CHECK(loaded->basis_id == a.basis_id);
  CHECK(loaded->basis_kind == "stacked-rrr");
  CHECK(loaded->id == standalone.id);
  CHECK_FALSE(SharedArtifact::IsSharedFile(path));

  // Both in one file: the basis once, a section each; each section reads back as its
  // standalone artifact, id included.
  SharedArtifact both;
  REQUIRE(both.Add(a).ok());
  REQUIRE(both.Add(b).ok());
  const std::string shared_path = testing::TempDir() + "/shared_basis_both.safetensors";
  REQUIRE(both.Save(shared_path).ok());
  CHECK(SharedArtifact::IsSharedFile(shared_path));
  auto reread = SharedArtifact::Load(shared_path);
  INFO(reread.status());
  REQUIRE(reread.ok());
  REQUIRE(reread->consumers().size() == 2);
  CHECK(reread->basis_id() == a.basis_id);
  auto babi_section = reread->ForConsumer(babi->digest());
  REQUIRE(babi_section.ok());
  CHECK(babi_section->id == standalone.id);
  CHECK(babi_section->reuse[2].value.decoder == a.reuse[2].value.decoder);
  CHECK(babi_section->patch_order == a.patch_order);
  CHECK(babi_section->quality.size() == a.quality.size());
  auto wiki_section = reread->ForConsumer(wiki->digest());
  REQUIRE(wiki_section.ok());
  CHECK(wiki_section->reuse[0].key.encoder == babi_section->reuse[0].key.encoder);
  CHECK(wiki_section->reuse[0].key.decoder == b.reuse[0].key.decoder);
  // One file of two consumers is smaller than two files: the encoders are stored once.
  auto size_of = [](const std::string& p) { return std::filesystem::file_size(p); };
  CHECK(size_of(shared_path) < 2 * size_of(path));
  // Clear refusals.
  auto missing = reread->ForConsumer(base->digest());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("stories260K-wiki"));
  auto as_pair = ScdArtifact::Load(shared_path);
  CHECK(as_pair.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(as_pair.status().message()), Catch::Contains("several consumers"));
  ScdArtifact own = a;
  own.basis_id.clear();
  CHECK(both.Add(own).code() == absl::StatusCode::kInvalidArgument);
  ScdArtifact other_basis = b;
  other_basis.reuse[1].key.encoder[0] += 1.0f;
  CHECK(both.Add(other_basis).code() == absl::StatusCode::kInvalidArgument);

  // A consumer added later (the base model itself as a third consumer, on other passages):
  // the basis's tensors keep their bytes, and the first two sections read back as before.
  auto basis = BasisOf(*babi_section);
  INFO(basis.status());
  REQUIRE(basis.ok());
  CHECK(basis->id == a.basis_id);
  SharedConsumer third;
  third.backend = producer.get();
  third.held = SampledPassages(*producer, 8, 96, 61);
  auto added = CalibrateOnBasis(*producer, third, SampledPassages(*producer, 24, 96, 71),
                                SharedQuickOptions(), *basis);
  INFO(added.status());
  REQUIRE(added.ok());
  CHECK(added->basis_id == a.basis_id);
  SharedArtifact extended = *reread;
  REQUIRE(extended.Add(*added).ok());
  const std::string extended_path = testing::TempDir() + "/shared_basis_three.safetensors";
  REQUIRE(extended.Save(extended_path).ok());
  auto before = SafetensorsFile::Open(shared_path);
  auto after = SafetensorsFile::Open(extended_path);
  REQUIRE(before.ok());
  REQUIRE(after.ok());
  int basis_tensors = 0;
  for (const std::string& name : (*before)->TensorNames()) {
    if (name.rfind("basis.", 0) != 0) continue;
    ++basis_tensors;
    CHECK((*before)->ReadAsFloat(name).value() == (*after)->ReadAsFloat(name).value());
  }
  CHECK(basis_tensors == 4 * a.num_layers + 2 * a.num_layers);  // K, V: mu_in + encoder; H_in too
  auto three = SharedArtifact::Load(extended_path);
  REQUIRE(three.ok());
  CHECK(three->consumers().size() == 3);
  CHECK(three->ForConsumer(babi->digest())->id == standalone.id);
  CHECK(three->ForConsumer(base->digest())->basis_id == a.basis_id);
  ScdArtifact pair_own = a;
  pair_own.basis_id.clear();
  CHECK(BasisOf(pair_own).status().code() == absl::StatusCode::kInvalidArgument);
  std::remove(path.c_str());
  std::remove(shared_path.c_str());
  std::remove(extended_path.c_str());
}

TEST_CASE("With one consumer the shared basis fits like the pair's own calibration", "[cpu]") {
  auto base = Load("models/stories260K");
  auto babi = Load("models/stories260K-babi-qa");
  auto producer = Cpu(base);
  auto consumer = Cpu(babi);
  const auto train = SampledPassages(*producer, 12, 64, 51);
  const CalibrationOptions o = SharedQuickOptions();
  auto data = CollectCalibrationData(*producer, *consumer, train, o);
  REQUIRE(data.ok());
  auto basis = FitSharedBasis({&*data}, *base, o, SharedBasisKind::kStackedRrr);
  REQUIRE(basis.ok());
  auto own = FitArtifact(*data, *base, *babi, o, /*fit_patches=*/false);
  auto shared = FitArtifact(*data, *base, *babi, o, /*fit_patches=*/false, nullptr, &*basis);
  REQUIRE(own.ok());
  REQUIRE(shared.ok());
  CHECK(own->basis_id.empty());
  CHECK(shared->basis_id == basis->id);
  const auto& own_fits = own->report["fits"];
  const auto& shared_fits = shared->report["fits"];
  for (size_t l = 0; l < own_fits.size(); ++l) {
    for (const char* state : {"key", "value"}) {
      INFO("layer " << l << " " << state);
      const double e_own = own_fits[l][state]["rel_err"].get<double>();
      const double e_shared = shared_fits[l][state]["rel_err"].get<double>();
      CHECK(e_shared == Approx(e_own).epsilon(1e-3).margin(1e-6));
    }
  }
  // A basis of another producer, or of other ranks, is refused.
  SharedBasis other = *basis;
  other.producer_digest = babi->digest();
  CHECK(FitArtifact(*data, *base, *babi, o, false, nullptr, &other).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CalibrationOptions ranks = o;
  ranks.rank_k = 8;
  CHECK(FitArtifact(*data, *base, *babi, ranks, false, nullptr, &*basis).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace scd
