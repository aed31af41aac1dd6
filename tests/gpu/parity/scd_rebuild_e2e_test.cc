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

using testing::kLogitMaxAbs;
using testing::kLogitMeanAbs;

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

// The bundled pair with its calibrated artifact; the producer side on the CPU (40 seeded
// tokens after BOS, the scd payload) and the CPU and CUDA consumer backends.
struct RebuildPair {
  RebuildPair();
  // The layers `q` patches.
  std::vector<int> PatchedLayers(const Payload& q) const;

  std::shared_ptr<const ScdArtifact> artifact;
  std::shared_ptr<const Model> producer_model = testing::LoadSharedModel("models/stories260K");
  std::shared_ptr<const Model> consumer_model =
      testing::LoadSharedModel("models/stories260K-babi-qa");
  std::vector<int32_t> tokens;
  std::unique_ptr<Backend> producer;
  std::unique_ptr<Sequence> pseq;
  PrefillResult states;
  std::unique_ptr<ProducerCodec> encoder;
  Payload payload;
  int t = 0;  // the payload's positions
  std::unique_ptr<ConsumerCodec> decoder;
  const int32_t next = 42;
  std::unique_ptr<Backend> cpu, gpu;
  std::unique_ptr<Sequence> cpu_seq, gpu_seq;  // the payload rebuilt by `decoder`
};

RebuildPair::RebuildPair() {
  auto loaded = ScdArtifact::Load(ArtifactPath());
  INFO("artifact " << ArtifactPath() << ": " << loaded.status());
  REQUIRE(loaded.ok());
  artifact = std::make_shared<const ScdArtifact>(std::move(loaded).value());
  REQUIRE(artifact->CheckPair(producer_model.get(), consumer_model.get()).ok());
  tokens = testing::RandomInts(40, 7, consumer_model->config.vocab_size - 3);
  for (int32_t& token : tokens) token += 3;
  tokens.front() = 1;
  producer = testing::MakeBackend(BackendKind::kCpu, producer_model);
  pseq = producer->NewSequence(64).value();
  REQUIRE(producer->Prefill(*pseq, tokens, ProducerPrefillOptions(CodecMode::kScd), &states).ok());
  auto created_encoder = ProducerCodec::Create(producer_model, consumer_model->digest(), artifact);
  REQUIRE(created_encoder.ok());
  encoder = std::move(created_encoder).value();
  auto encoded = encoder->Encode(CodecMode::kScd, tokens, states);
  INFO(encoded.status());
  REQUIRE(encoded.ok());
  payload = std::move(encoded).value();
  t = static_cast<int>(tokens.size());
  CHECK(PatchedLayers(payload).size() >= 1);  // both paths of the rebuild run
  auto created_decoder = ConsumerCodec::Create(consumer_model, producer_model->digest(), artifact);
  REQUIRE(created_decoder.ok());
  decoder = std::move(created_decoder).value();
  cpu = testing::MakeBackend(BackendKind::kCpu, consumer_model);
  gpu = testing::MakeBackend(BackendKind::kCuda, consumer_model);
}

std::vector<int> RebuildPair::PatchedLayers(const Payload& q) const {
  std::vector<int> layers;
  for (int l = 0; l < consumer_model->config.num_layers; ++l) {
    if (q.Find(BlockKind::kPatch, l) != nullptr) layers.push_back(l);
  }
  return layers;
}

// cpu (the reference), append (host decode, then the CUDA backend's AppendKv) and gpu (the
// codec's default on a CUDA backend, codes straight into the sequence's cache) agree; the gpu
// rebuild's logits.
std::vector<float> CheckGpuRebuildAgainstCpu(RebuildPair& f) {
  f.cpu_seq = f.cpu->NewSequence(64).value();
  REQUIRE(f.decoder->Rebuild(f.payload, *f.cpu, *f.cpu_seq).ok());
  const std::vector<float> want = DecodeOne(*f.cpu, *f.cpu_seq, f.next);

  CodecOptions host_decode;
  host_decode.gpu_rebuild = false;
  auto appender =
      ConsumerCodec::Create(f.consumer_model, f.producer_model->digest(), f.artifact, host_decode);
  REQUIRE(appender.ok());
  auto append_seq = f.gpu->NewSequence(64).value();
  REQUIRE((*appender)->Rebuild(f.payload, *f.gpu, *append_seq).ok());
  const std::vector<float> append = DecodeOne(*f.gpu, *append_seq, f.next);

  f.gpu_seq = f.gpu->NewSequence(64).value();
  RebuildStats stats;
  const absl::Status rebuilt = f.decoder->Rebuild(f.payload, *f.gpu, *f.gpu_seq, &stats);
  INFO(rebuilt);
  REQUIRE(rebuilt.ok());
  CHECK(f.gpu_seq->length() == f.t);
  CHECK(stats.decode_seconds > 0);
  CHECK(stats.append_seconds == 0);  // no host decode, no AppendKv
  const std::vector<float> got = DecodeOne(*f.gpu, *f.gpu_seq, f.next);

  testing::CheckLogits(append, want, kLogitMaxAbs, kLogitMeanAbs, "append vs cpu");
  testing::CheckLogits(got, want, kLogitMaxAbs, kLogitMeanAbs, "gpu rebuild vs cpu");
  testing::CheckLogits(got, append, kLogitMaxAbs / 2, kLogitMeanAbs / 2, "gpu rebuild vs append");
  return got;
}

// chunked: the decode engine's way (engine.rebuild_chunk), the payload's rows 7 at a time
// through the same GPU path; REUSE rows are independent, PATCH rows go through GEMMs of
// another height. Its logits are the whole rebuild's (`got`).
void CheckChunkedGpuRebuild(RebuildPair& f, const std::vector<float>& got) {
  auto chunked_seq = f.gpu->NewSequence(64).value();
  PayloadChunks chunks(f.payload);
  int pieces = 0;
  while (chunks.remaining() > 0) {
    const absl::StatusOr<size_t> n = chunks.Advance(*f.decoder, *f.gpu, *chunked_seq, 7);
    INFO(n.status());
    REQUIRE(n.ok());
    ++pieces;
  }
  CHECK(pieces == (f.t + 6) / 7);
  CHECK(chunked_seq->length() == f.t);
  testing::CheckLogits(DecodeOne(*f.gpu, *chunked_seq, f.next), got, kLogitMaxAbs / 2,
                       kLogitMeanAbs / 2, "gpu rebuild in chunks vs whole");
}

// A second payload into the same sequence reuses the rebuilder (positions t+1 onwards).
void CheckSecondPayloadAppends(RebuildPair& f) {
  auto pseq2 = f.producer->NewSequence(64).value();
  PrefillResult states2;
  const std::vector<int32_t> more(f.tokens.begin() + 1, f.tokens.begin() + 9);
  REQUIRE(
      f.producer->Prefill(*pseq2, more, ProducerPrefillOptions(CodecMode::kScd), &states2).ok());
  auto payload2 = f.encoder->Encode(CodecMode::kScd, more, states2, f.t + 1);
  REQUIRE(payload2.ok());
  REQUIRE(f.decoder->Rebuild(*payload2, *f.gpu, *f.gpu_seq).ok());
  CHECK(f.gpu_seq->length() == f.t + 1 + 8);
}

// `q` rebuilt on the GPU gives the CPU rebuild's logits.
void CheckMatchesCpu(RebuildPair& f, const Payload& q, const std::string& what) {
  INFO(what);
  auto cs = f.cpu->NewSequence(64).value();
  REQUIRE(f.decoder->Rebuild(q, *f.cpu, *cs).ok());
  auto gs = f.gpu->NewSequence(64).value();
  const absl::Status st = f.decoder->Rebuild(q, *f.gpu, *gs);
  INFO(st);
  REQUIRE(st.ok());
  CHECK(gs->length() == f.t);
  testing::CheckLogits(DecodeOne(*f.gpu, *gs, f.next), DecodeOne(*f.cpu, *cs, f.next), kLogitMaxAbs,
                       kLogitMeanAbs, what + " vs cpu");
}

// An scd payload of the same tokens patching `layers` only (a producer's ablation).
Payload AblationPayload(RebuildPair& f, std::vector<int> layers) {
  CodecOptions o;
  o.patch_layers = layers;
  auto producer_codec =
      ProducerCodec::Create(f.producer_model, f.consumer_model->digest(), f.artifact, o);
  REQUIRE(producer_codec.ok());
  auto q = (*producer_codec)->Encode(CodecMode::kScd, f.tokens, f.states);
  REQUIRE(q.ok());
  std::sort(layers.begin(), layers.end());
  CHECK(f.PatchedLayers(*q) == layers);
  return std::move(q).value();
}

// One device rebuilder serves every payload whose patched layers are among the artifact's
// selection (ScdArtifact::PatchLayers): an scd-reuse payload (none) and one patching a
// subset take no more device memory. A payload patching another layer (a producer's
// ablation) gets a rebuilder of its own, once.
void CheckRebuilderShared(RebuildPair& f) {
  const WorkspaceBytes held = f.decoder->RebuildWorkspace();
  CHECK(held.device > 0);
  CHECK(held.pinned_host > 0);
  auto reuse_payload = f.encoder->Encode(CodecMode::kScdReuse, f.tokens, f.states);
  REQUIRE(reuse_payload.ok());
  CHECK(f.PatchedLayers(*reuse_payload).empty());
  CheckMatchesCpu(f, *reuse_payload, "scd-reuse payload");
  const std::vector<int> selected = f.artifact->PatchLayers();
  REQUIRE(selected.size() >= 2);
  std::vector<int> outside;  // fitted layers the artifact does not select
  for (const auto& [l, patch] : f.artifact->patches) {
    if (std::find(selected.begin(), selected.end(), l) == selected.end()) outside.push_back(l);
  }
  REQUIRE(!outside.empty());
  CheckMatchesCpu(f, AblationPayload(f, {selected[1]}), "scd payload patching one selected layer");
  CHECK(f.decoder->RebuildWorkspace().device == held.device);
  CHECK(f.decoder->RebuildWorkspace().pinned_host == held.pinned_host);
  CheckMatchesCpu(f, AblationPayload(f, {outside[0]}),
                  "scd payload patching a layer outside the selection");
  const WorkspaceBytes two = f.decoder->RebuildWorkspace();
  CHECK(two.device > held.device);
  CheckMatchesCpu(f, AblationPayload(f, {outside[0]}), "the same again");
  CHECK(f.decoder->RebuildWorkspace().device == two.device);
}

// Bad payloads are refused on the GPU path without touching the sequence: a layer whose code
// block is missing, and one that no longer fits the sequence. The cache hooks refuse a
// sequence of another backend and a commit past the capacity.
void CheckRefusals(RebuildPair& f) {
  auto fresh = f.gpu->NewSequence(64).value();
  Payload broken = f.payload;
  broken.blocks.erase(
      std::find_if(broken.blocks.begin(), broken.blocks.end(),
                   [](const PayloadBlock& b) { return b.kind == BlockKind::kKey; }));
  CHECK(f.decoder->Rebuild(broken, *f.gpu, *fresh).code() == absl::StatusCode::kInvalidArgument);
  CHECK(fresh->length() == 0);
  auto small = f.gpu->NewSequence(f.t - 1).value();
  CHECK(!f.decoder->Rebuild(f.payload, *f.gpu, *small).ok());
  CHECK(small->length() == 0);

  CHECK(!cuda::CudaCommitPositions(*f.gpu, *f.gpu_seq, 64).ok());
  auto cpu_view = cuda::CudaSequenceCache(*f.cpu, *f.cpu_seq);
  CHECK(cpu_view.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace

TEST_CASE("SCD GPU rebuild of the bundled pair matches the CPU rebuild", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  RebuildPair f;
  const std::vector<float> got = CheckGpuRebuildAgainstCpu(f);
  CheckChunkedGpuRebuild(f, got);
  CheckSecondPayloadAppends(f);
  CheckRebuilderShared(f);
  CheckRefusals(f);
}

}  // namespace scd
