// End-to-end parity of SCD's GPU rebuild (common/scd/gpu_rebuild.h over
// kernels/cuda/scd_rebuilder.h) on the bundled pair: the calibrated artifact
// configs/calibration/stories260K-babi-qa.scd.safetensors, a producer prefill of stories260K on the
// CPU and its scd payload (REUSE codes plus PATCH codes on the artifact's selected layers, int8
// on the wire), then three consumers of stories260K-babi-qa, each one decode step:
//   cpu     ConsumerCodec::Rebuild on the CPU backend (the reference);
//   append  the same codec with gpu_rebuild = false on the CUDA backend: host decode of the
//           codes, F32 K/V uploaded through AppendKv;
//   gpu     the codec's default on the CUDA backend: codes to the GPU, decoded into the
//           sequence's cache there (CudaSequenceCache, CudaCommitPositions); and the same
//           in chunks of rows (PayloadChunks), as the decode engine rebuilds.
// Tolerances: gpu and append against cpu use backend_test's CPU-vs-CUDA logit bounds on
// stories260K (0.6 max abs, 0.06 mean abs; see its header for how they were calibrated). gpu
// against append isolates the rebuild: REUSE layers differ only in F32 summation order before
// the same BF16 store, PATCH layers by the BF16 rounding of Ĥ and [W_K; W_V] in the GEMM (the
// backend's own GEMM-input rounding), so half of those bounds applies.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "common/runtime/cuda/backend_access.h"
#include "common/scd/artifact.h"
#include "common/scd/codec.h"
#include "common/serving/payload_chunks.h"
#include "tests/gpu/parity/cuda_test_support.h"
#include "tests/test_support.h"

namespace scd {
namespace {

constexpr double kLogitMaxAbs = 0.6, kLogitMeanAbs = 0.06;

std::string ArtifactPath() {
  return testing::SourceFile("configs/calibration/stories260K-babi-qa.scd.safetensors");
}

// Next-token logits after `next` on a sequence that already holds the payload's positions.
std::vector<float> DecodeOne(Backend& backend, Sequence& seq, int32_t next) {
  std::vector<float> logits;
  Sequence* seqs[] = {&seq};
  const absl::Status s = backend.Decode(seqs, {&next, 1}, &logits);
  INFO(s);
  REQUIRE(s.ok());
  return logits;
}

}  // namespace

TEST_CASE("SCD GPU rebuild of the bundled pair matches the CPU rebuild", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  auto loaded = ScdArtifact::Load(ArtifactPath());
  INFO("artifact " << ArtifactPath() << ": " << loaded.status());
  REQUIRE(loaded.ok());
  auto artifact = std::make_shared<const ScdArtifact>(std::move(loaded).value());
  auto producer_model = testing::LoadSharedModel("models/stories260K");
  auto consumer_model = testing::LoadSharedModel("models/stories260K-babi-qa");
  REQUIRE(artifact->CheckPair(producer_model.get(), consumer_model.get()).ok());

  // Producer side on the CPU: 40 seeded tokens after BOS, the scd payload.
  std::vector<int32_t> tokens = testing::RandomInts(40, 7, consumer_model->config.vocab_size - 3);
  for (int32_t& t : tokens) t += 3;
  tokens.front() = 1;
  auto producer = testing::MakeBackend(BackendKind::kCpu, producer_model);
  auto pseq = producer->NewSequence(64).value();
  PrefillResult states;
  REQUIRE(producer->Prefill(*pseq, tokens, ProducerPrefillOptions(CodecMode::kScd), &states).ok());
  auto encoder = ProducerCodec::Create(producer_model, consumer_model->digest, artifact);
  REQUIRE(encoder.ok());
  auto payload = (*encoder)->Encode(CodecMode::kScd, tokens, states);
  INFO(payload.status());
  REQUIRE(payload.ok());
  const int t = static_cast<int>(tokens.size());
  int patch_layers = 0;
  for (int l = 0; l < consumer_model->config.num_layers; ++l) {
    patch_layers += payload->Find(BlockKind::kPatch, l) != nullptr;
  }
  CHECK(patch_layers >= 1);  // both paths of the rebuild run

  auto decoder = ConsumerCodec::Create(consumer_model, producer_model->digest, artifact);
  REQUIRE(decoder.ok());
  const int32_t next = 42;

  // cpu: the reference.
  auto cpu = testing::MakeBackend(BackendKind::kCpu, consumer_model);
  auto cpu_seq = cpu->NewSequence(64).value();
  REQUIRE((*decoder)->Rebuild(*payload, *cpu, *cpu_seq).ok());
  const std::vector<float> want = DecodeOne(*cpu, *cpu_seq, next);

  // append: host decode, then the CUDA backend's AppendKv.
  auto gpu = testing::MakeBackend(BackendKind::kCuda, consumer_model);
  CodecOptions host_decode;
  host_decode.gpu_rebuild = false;
  auto appender =
      ConsumerCodec::Create(consumer_model, producer_model->digest, artifact, host_decode);
  REQUIRE(appender.ok());
  auto append_seq = gpu->NewSequence(64).value();
  REQUIRE((*appender)->Rebuild(*payload, *gpu, *append_seq).ok());
  const std::vector<float> append = DecodeOne(*gpu, *append_seq, next);

  // gpu: the codec's default on a CUDA backend, codes straight into the sequence's cache.
  auto gpu_seq = gpu->NewSequence(64).value();
  RebuildStats stats;
  const absl::Status rebuilt = (*decoder)->Rebuild(*payload, *gpu, *gpu_seq, &stats);
  INFO(rebuilt);
  REQUIRE(rebuilt.ok());
  CHECK(gpu_seq->length() == t);
  CHECK(stats.decode_seconds > 0);
  CHECK(stats.append_seconds == 0);  // no host decode, no AppendKv
  const std::vector<float> got = DecodeOne(*gpu, *gpu_seq, next);

  testing::CheckLogits(append, want, kLogitMaxAbs, kLogitMeanAbs, "append vs cpu");
  testing::CheckLogits(got, want, kLogitMaxAbs, kLogitMeanAbs, "gpu rebuild vs cpu");
  testing::CheckLogits(got, append, kLogitMaxAbs / 2, kLogitMeanAbs / 2, "gpu rebuild vs append");

  // chunked: the decode engine's way (engine.rebuild_chunk), the payload's rows 7 at a time
  // through the same GPU path; REUSE rows are independent, PATCH rows go through GEMMs of
  // another height.
  auto chunked_seq = gpu->NewSequence(64).value();
  PayloadChunks chunks(*payload);
  int pieces = 0;
  while (chunks.remaining() > 0) {
    const absl::StatusOr<size_t> n = chunks.Advance(**decoder, *gpu, *chunked_seq, 7);
    INFO(n.status());
    REQUIRE(n.ok());
    ++pieces;
  }
  CHECK(pieces == (t + 6) / 7);
  CHECK(chunked_seq->length() == t);
  testing::CheckLogits(DecodeOne(*gpu, *chunked_seq, next), got, kLogitMaxAbs / 2,
                       kLogitMeanAbs / 2, "gpu rebuild in chunks vs whole");

  // A second payload into the same sequence reuses the rebuilder (positions t+1 onwards).
  auto pseq2 = producer->NewSequence(64).value();
  PrefillResult states2;
  const std::vector<int32_t> more(tokens.begin() + 1, tokens.begin() + 9);
  REQUIRE(producer->Prefill(*pseq2, more, ProducerPrefillOptions(CodecMode::kScd), &states2).ok());
  auto payload2 = (*encoder)->Encode(CodecMode::kScd, more, states2, t + 1);
  REQUIRE(payload2.ok());
  REQUIRE((*decoder)->Rebuild(*payload2, *gpu, *gpu_seq).ok());
  CHECK(gpu_seq->length() == t + 1 + 8);

  // One device rebuilder serves every payload whose patched layers are among the artifact's
  // selection (ScdArtifact::PatchLayers): an scd-reuse payload (none) and one patching a
  // subset take no more device memory. A payload patching another layer (a producer's
  // ablation) gets a rebuilder of its own, once.
  auto matches_cpu = [&](const Payload& q, const std::string& what) {
    INFO(what);
    auto cs = cpu->NewSequence(64).value();
    REQUIRE((*decoder)->Rebuild(q, *cpu, *cs).ok());
    auto gs = gpu->NewSequence(64).value();
    const absl::Status st = (*decoder)->Rebuild(q, *gpu, *gs);
    INFO(st);
    REQUIRE(st.ok());
    CHECK(gs->length() == t);
    testing::CheckLogits(DecodeOne(*gpu, *gs, next), DecodeOne(*cpu, *cs, next), kLogitMaxAbs,
                         kLogitMeanAbs, what + " vs cpu");
  };
  auto patches = [&](const Payload& q) {
    std::vector<int> layers;
    for (int l = 0; l < consumer_model->config.num_layers; ++l) {
      if (q.Find(BlockKind::kPatch, l) != nullptr) layers.push_back(l);
    }
    return layers;
  };
  const WorkspaceBytes held = (*decoder)->RebuildWorkspace();
  CHECK(held.device > 0);
  CHECK(held.pinned_host > 0);
  auto reuse_payload = (*encoder)->Encode(CodecMode::kScdReuse, tokens, states);
  REQUIRE(reuse_payload.ok());
  CHECK(patches(*reuse_payload).empty());
  matches_cpu(*reuse_payload, "scd-reuse payload");
  const std::vector<int> selected = artifact->PatchLayers();
  REQUIRE(selected.size() >= 2);
  std::vector<int> outside;  // fitted layers the artifact does not select
  for (const auto& [l, patch] : artifact->patches) {
    if (std::find(selected.begin(), selected.end(), l) == selected.end()) outside.push_back(l);
  }
  REQUIRE(!outside.empty());
  auto ablation = [&](std::vector<int> layers) {
    CodecOptions o;
    o.patch_layers = layers;
    auto producer_codec =
        ProducerCodec::Create(producer_model, consumer_model->digest, artifact, o);
    REQUIRE(producer_codec.ok());
    auto q = (*producer_codec)->Encode(CodecMode::kScd, tokens, states);
    REQUIRE(q.ok());
    std::sort(layers.begin(), layers.end());
    CHECK(patches(*q) == layers);
    return std::move(q).value();
  };
  matches_cpu(ablation({selected[1]}), "scd payload patching one selected layer");
  CHECK((*decoder)->RebuildWorkspace().device == held.device);
  CHECK((*decoder)->RebuildWorkspace().pinned_host == held.pinned_host);
  matches_cpu(ablation({outside[0]}), "scd payload patching a layer outside the selection");
  const WorkspaceBytes two = (*decoder)->RebuildWorkspace();
  CHECK(two.device > held.device);
  matches_cpu(ablation({outside[0]}), "the same again");
  CHECK((*decoder)->RebuildWorkspace().device == two.device);

  // Bad payloads are refused on the GPU path without touching the sequence: a layer whose
  // code block is missing, and one that no longer fits the sequence.
  auto fresh = gpu->NewSequence(64).value();
  Payload broken = *payload;
  broken.blocks.erase(
      std::find_if(broken.blocks.begin(), broken.blocks.end(),
                   [](const PayloadBlock& b) { return b.kind == BlockKind::kKey; }));
  CHECK((*decoder)->Rebuild(broken, *gpu, *fresh).code() == absl::StatusCode::kInvalidArgument);
  CHECK(fresh->length() == 0);
  auto small = gpu->NewSequence(t - 1).value();
  CHECK(!(*decoder)->Rebuild(*payload, *gpu, *small).ok());
  CHECK(small->length() == 0);

  // The cache hooks refuse a sequence of another backend and a commit past the capacity.
  CHECK(!cuda::CudaCommitPositions(*gpu, *gpu_seq, 64).ok());
  auto cpu_view = cuda::CudaSequenceCache(*cpu, *cpu_seq);
  CHECK(cpu_view.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace scd
