// Calibration on a shared basis with the bundled producer and both bundled specialists: the
// artifacts carry the same encoders and basis id, so one payload (byte for byte, the basis
// digest in its header) is what the producer sends to either, and each specialist rebuilds it
// into exactly the KV of a payload made for it alone; a consumer on another basis, or a
// payload short of a layer's codes, is refused clearly; one file holds both (the basis once),
// and each reads back as its standalone artifact; a consumer added later leaves the basis's
// bytes, and the payloads made before, as they were; with one consumer the stacked basis fits
// as well as the pair's own calibration.
#include "common/scd/shared_calibration.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "common/model/safetensors.h"
#include "common/scd/codec.h"
#include "common/scd/shared_artifact.h"
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

  // One payload for both: each specialist's producer codec, serving the other's section too,
  // makes the same bytes (the basis digest in place of a pair digest), and each specialist
  // rebuilds them into exactly the KV of a payload made for it alone.
  auto shared_a = std::make_shared<const ScdArtifact>(a);
  auto shared_b = std::make_shared<const ScdArtifact>(b);
  auto enc_a = ProducerCodec::Create(base, babi->digest(), shared_a).value();
  auto enc_b = ProducerCodec::Create(base, wiki->digest(), shared_b).value();
  auto alone_a = ProducerCodec::Create(base, babi->digest(), shared_a).value();
  auto alone_b = ProducerCodec::Create(base, wiki->digest(), shared_b).value();
  REQUIRE(enc_a->ServeSections({&b}).ok());
  REQUIRE(enc_b->ServeSections({&a, &b}).ok());  // its own section among them: no matter
  CHECK(enc_a->pair_digest(CodecMode::kScd) == MakeBasisDigest(base->digest(), a.basis_id));
  CHECK(enc_a->pair_digest(CodecMode::kRaw) != enc_b->pair_digest(CodecMode::kRaw));
  const std::vector<int32_t>& context = consumers[0].held[0];
  PrefillResult states;
  auto pseq = producer->NewSequence(128).value();
  REQUIRE(producer->Prefill(*pseq, context, ProducerPrefillOptions(CodecMode::kScd), &states).ok());
  auto dec_a = ConsumerCodec::Create(babi, base->digest(), shared_a).value();
  auto dec_b = ConsumerCodec::Create(wiki, base->digest(), shared_b).value();
  auto kv_of = [&](const ConsumerCodec& dec, Backend& backend, const Payload& p) {
    auto seq = backend.NewSequence(128).value();
    absl::Status st = dec.Rebuild(p, backend, *seq);
    INFO(st);
    REQUIRE(st.ok());
    ExternalKv kv;
    REQUIRE(backend.ReadKv(*seq, 0, seq->length(), &kv).ok());
    return kv;
  };
  for (CodecMode mode : {CodecMode::kScdReuse, CodecMode::kScd}) {
    for (int rung : {0, 3}) {
      INFO(CodecModeName(mode) << " rung " << rung);
      const Payload pa = enc_a->Encode(mode, context, states, 0, rung).value();
      const Payload pb = enc_b->Encode(mode, context, states, 0, rung).value();
      CHECK(pa.on_basis);
      CHECK(SerializePayload(pa) == SerializePayload(pb));
      const Payload wire = ParsePayload(SerializePayload(pa)).value();
      CHECK(wire.on_basis);
      for (auto [dec, backend, alone] :
           {std::tuple{dec_a.get(), babi_backend.get(), alone_a.get()},
            std::tuple{dec_b.get(), wiki_backend.get(), alone_b.get()}}) {
        const ExternalKv shared_kv = kv_of(*dec, *backend, wire);
        const ExternalKv own_kv =
            kv_of(*dec, *backend, alone->Encode(mode, context, states, 0, rung).value());
        CHECK(shared_kv.k_pre_rope == own_kv.k_pre_rope);
        CHECK(shared_kv.v == own_kv.v);
      }
    }
  }
  // The union of both patch selections travels (and no more than one set of REUSE codes).
  const Payload both_layers = enc_a->Encode(CodecMode::kScd, context, states).value();
  for (int l : a.PatchLayers()) CHECK(both_layers.Find(BlockKind::kPatch, l) != nullptr);
  for (int l : b.PatchLayers()) CHECK(both_layers.Find(BlockKind::kPatch, l) != nullptr);
  // What it adds to a payload of one specialist's own layout, as mode auto weighs it.
  const Payload own_only = alone_a->Encode(CodecMode::kScd, context, states).value();
  const double extra = (static_cast<double>(SerializePayload(both_layers).size()) -
                        static_cast<double>(SerializePayload(own_only).size())) /
                       static_cast<double>(context.size());
  CHECK(std::abs(enc_a->SharedExtraBytesPerToken(CodecMode::kScd, 0) - extra) <= 0.05 * extra + 1);
  CHECK(alone_a->SharedExtraBytesPerToken(CodecMode::kScd, 0) == 0);
  CHECK(enc_a->SharedExtraBytesPerToken(CodecMode::kRaw, 0) == 0);
  // Clear refusals: a payload short of a layer's codes; a consumer on another basis,
  // or on a pair's own code; sections that cannot share one payload.
  Payload short_of = both_layers;
  const int gone = a.patch_order[0];
  short_of.blocks.erase(
      std::remove_if(short_of.blocks.begin(), short_of.blocks.end(),
                     [gone](const PayloadBlock& blk) { return blk.layer == gone; }),
      short_of.blocks.end());
  auto seq = babi_backend->NewSequence(128).value();
  absl::Status lacks = dec_a->Rebuild(short_of, *babi_backend, *seq);
  CHECK(lacks.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(lacks.message()), Catch::Contains("layer " + std::to_string(gone)));
  ScdArtifact elsewhere = b;
  elsewhere.basis_id = std::string(64, 'e');
  auto dec_elsewhere =
      ConsumerCodec::Create(wiki, base->digest(), std::make_shared<const ScdArtifact>(elsewhere))
          .value();
  auto seq2 = wiki_backend->NewSequence(128).value();
  absl::Status other = dec_elsewhere->Rebuild(both_layers, *wiki_backend, *seq2);
  CHECK(other.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(other.message()), Catch::Contains("another producer or shared basis"));
  ScdArtifact pair_code = b;
  pair_code.basis_id.clear();
  auto dec_pair =
      ConsumerCodec::Create(wiki, base->digest(), std::make_shared<const ScdArtifact>(pair_code))
          .value();
  absl::Status not_shared = dec_pair->Rebuild(both_layers, *wiki_backend, *seq2);
  CHECK(not_shared.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(not_shared.message()), Catch::Contains("no shared basis"));
  CHECK(enc_a->ServeSections({&elsewhere}).code() == absl::StatusCode::kFailedPrecondition);
  ScdArtifact other_budget = b;
  other_budget.patch_budget = 1;
  absl::Status ladders = enc_a->ServeSections({&other_budget});
  CHECK(ladders.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(ladders.message()), Catch::Contains("--patch-layers"));

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
  // The payload made before the extension still decodes, into the same KV, with the
  // extended file's section.
  auto dec_three = ConsumerCodec::Create(
                       babi, base->digest(),
                       std::make_shared<const ScdArtifact>(*three->ForConsumer(babi->digest())))
                       .value();
  CHECK(kv_of(*dec_three, *babi_backend, both_layers).k_pre_rope ==
        kv_of(*dec_a, *babi_backend, both_layers).k_pre_rope);
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
