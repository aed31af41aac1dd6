// See reference.h.
#include "tests/daemons/reference.h"

#include <algorithm>
#include <catch2/catch.hpp>

#include "common/runtime/sampler.h"
#include "common/scd/artifact.h"
#include "common/scd/codec.h"
#include "common/scd/model_pair.h"
#include "tests/daemons/daemon_harness.h"

namespace scd::testing {

ReferenceOutput ReferenceGreedy(const std::string& mode_name, const std::string& prompt,
                                int max_tokens, WeightDtype dtype) {
  auto pair = LoadModelPair(ModelDir("stories260K"), ModelDir("stories260K-babi-qa"));
  REQUIRE(pair.ok());
  if (dtype != WeightDtype::kF32) {
    BackendOptions options;
    options.weights_dtype = dtype;
    auto producer = CreateBackend(BackendKind::kCpu, pair->producer_model, options);
    auto consumer = CreateBackend(BackendKind::kCpu, pair->consumer_model, options);
    REQUIRE(producer.ok());
    REQUIRE(consumer.ok());
    pair->producer = std::move(producer).value();
    pair->consumer = std::move(consumer).value();
  }
  auto artifact = ScdArtifact::Load(ArtifactPath());
  REQUIRE(artifact.ok());
  auto shared = std::make_shared<const ScdArtifact>(std::move(*artifact));
  auto mode = ParseCodecMode(mode_name);
  REQUIRE(mode.ok());
  auto producer = ProducerCodec::Create(pair->producer_model, shared->consumer_digest, shared);
  REQUIRE(producer.ok());
  auto consumer = ConsumerCodec::Create(pair->consumer_model, shared->producer_digest, shared);
  REQUIRE(consumer.ok());

  ReferenceOutput out;
  out.prompt = pair->tokenizer->Encode(prompt, true);
  REQUIRE(out.prompt.size() >= 2);
  // As the prefill daemon does (payload_block_tokens = prefix_cache.block_tokens = 16): the
  // payload covers the prompt up to its last whole 16-token block, the consumer prefills the rest.
  size_t covered = out.prompt.size() - 1;
  if (*mode != CodecMode::kOracle && covered >= 16) covered = covered / 16 * 16;
  const std::vector<int32_t> prefix(out.prompt.begin(), out.prompt.begin() + covered);
  const std::vector<int32_t> rest(out.prompt.begin() + covered, out.prompt.end());
  const int capacity = pair->consumer_model->config.max_position_embeddings;
  PrefillResult states;
  if (*mode != CodecMode::kOracle) {
    auto seq = pair->producer->NewSequence(static_cast<int>(prefix.size()));
    REQUIRE(seq.ok());
    REQUIRE(pair->producer->Prefill(**seq, prefix, ProducerPrefillOptions(*mode), &states).ok());
  }
  auto payload = (*producer)->Encode(*mode, prefix, states, 0);
  REQUIRE(payload.ok());
  auto parsed = ParsePayload(SerializePayload(*payload));
  REQUIRE(parsed.ok());
  auto cseq = pair->consumer->NewSequence(capacity);
  REQUIRE(cseq.ok());
  REQUIRE((*consumer)->Rebuild(*parsed, *pair->consumer, **cseq).ok());
  PrefillResult last;
  REQUIRE(pair->consumer->Prefill(**cseq, rest, PrefillOptions{}, &last).ok());
  std::vector<float> logits = last.logits;
  const auto& eos = pair->consumer_model->config.eos_token_ids;
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t next = ArgMax(logits);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
      out.stopped = true;
      break;
    }
    out.generated.push_back(next);
    if (i + 1 == max_tokens || (*cseq)->length() >= capacity) break;
    std::vector<Sequence*> seqs = {cseq->get()};
    std::vector<int32_t> inputs = {next};
    REQUIRE(pair->consumer->Decode(seqs, inputs, &logits).ok());
  }
  out.text = pair->tokenizer->Decode(out.generated);
  return out;
}

}  // namespace scd::testing
